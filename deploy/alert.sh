#!/bin/sh
# Alert of a scheduled training run that did not publish (pipelines.scheduled --alert_command=deploy/alert.sh).
# pipelines.scheduled sets RETRIEVAL_EXIT_CODE, RETRIEVAL_OUTCOME (bad_input, gate_refused, locked, failure),
# RETRIEVAL_RUN_DIR (empty when the job stopped before creating its run) and RETRIEVAL_MESSAGE (the job's last
# error line). This example writes one line to syslog (journalctl -t retrieval-train) and to stderr (the job's log);
# replace or extend the last lines with your pager, e.g. mail or a webhook:
#   printf '%s\n' "$message" | mail -s "retrieval: $RETRIEVAL_OUTCOME" ops@example.com
#   curl -fsS -m 10 --data-urlencode "text=$message" "$ALERT_WEBHOOK_URL"
message="retrieval training ${RETRIEVAL_OUTCOME:-unknown} (exit ${RETRIEVAL_EXIT_CODE:-?})${RETRIEVAL_RUN_DIR:+ run $RETRIEVAL_RUN_DIR}: ${RETRIEVAL_MESSAGE:-no message}"
logger -t retrieval-train -p user.err -- "$message" 2>/dev/null || true
printf 'ALERT %s\n' "$message" >&2
