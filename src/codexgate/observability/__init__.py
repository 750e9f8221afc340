"""What operators see: metrics, traces, transcripts and the live view, attached to each exchange
through server/observe.py."""
