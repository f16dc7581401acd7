"""What each field of a schedule means, in words: the help of the CLI's options and the
descriptions of the HTTP API's fields, written once."""

from __future__ import annotations

#: Each policy option's metavar (its choices or format) and help (with its default).
POLICY_HELP = {
    "overlap": (
        "skip|allow|buffer_one|buffer_all|replace",
        "While a previous run is not final: skip it, allow both, buffer_one (start it when "
        "the running one ends), buffer_all (queue every one, started one after another) or "
        "replace (revoke the running one). Default: skip.",
    ),
    "replace_with": (
        "terminate|revoke",
        "How overlap replace ends the open run: revoke it and terminate it where it "
        "executes, or revoke it only if it has not started (a started run finishes beside "
        "the new one). Default: terminate.",
    ),
    "catchup": (
        "latest|all|none",
        "Occurrences missed while beat was down or the schedule paused: run the latest once, "
        "all of them oldest first, or none. Default: latest.",
    ),
    "catchup_window": (
        "DURATION|none",
        "Missed occurrences older than this (e.g. 1h) are counted, not run. "
        "Default: none (no limit).",
    ),
    "jitter": (
        "DURATION",
        "Delay each occurrence by up to this (e.g. 30s), an offset fixed per occurrence, "
        "never past the next one. "
        "Default: 0s.",
    ),
    "start": (
        "TIME|none",
        "No occurrence before this ISO-8601 time with offset (2026-12-01T09:00:00+01:00). "
        "Default: none.",
    ),
    "end": (
        "TIME|none",
        "No occurrence after this ISO-8601 time with offset; the schedule then finishes. "
        "Default: none.",
    ),
    "remaining": (
        "N|none",
        "Scheduled runs left before the schedule finishes. Default: none (unlimited).",
    ),
    "max_failures": (
        "N|none",
        "Consecutive failed scheduled runs that disable the schedule as broken. "
        "Default: none (never).",
    ),
    "max_attempts": (
        "N",
        "Attempts of a failed occurrence, the first included. Default: 1 (no retry).",
    ),
    "backoff": (
        "DELAYS|none",
        "Waits between attempts: a list such as 30s,2m,10m (the last repeats) or 10s..10m "
        "(doubling, capped). Default: none (retry at once).",
    ),
    "expires": (
        "next|never|DURATION",
        "When a sent run's message expires if no worker started it: at the following "
        "occurrence, never, or after a duration such as 10m. Default: next.",
    ),
    "grace": (
        "DURATION|none",
        "How long an occurrence may be due, or its run sent, without starting before the "
        "schedule is late. Default: none (bridge_default_grace, 60s).",
    ),
    "max_runtime": (
        "DURATION|none",
        "How long a run may go before it overruns. "
        "Default: none (bridge_default_max_runtime, no limit).",
    ),
    "on_overrun": (
        "none|revoke|terminate",
        "What to do with a run that overruns besides alerting: nothing, revoke it, or revoke "
        "and terminate it. Default: none.",
    ),
    "alert_after": (
        "N|none",
        "Failed occurrences in a row before the schedule is failing and its incident opens. "
        "Default: none (bridge_default_alert_after, 1).",
    ),
    "recover_after": (
        "N|none",
        "Successful runs in a row before a failing schedule recovers and its incident "
        "closes. Default: none (bridge_default_recover_after, 1).",
    ),
    "keep_runs": (
        "N|none",
        "Final runs kept: the latest N, 0 for all. Default: none (bridge_history_keep_runs, 100).",
    ),
    "keep_days": (
        "N|none",
        "Final runs kept: those planned in the last N days, 0 for any age. "
        "Default: none (bridge_history_keep_days, 30).",
    ),
    "skip_calendars": (
        "NAMES|none",
        "Calendars (bridge calendar add) on whose days and times no occurrence is sent: "
        "each is counted as excluded. Default: none.",
    ),
}


#: The policies that take one of a few words, and what each word does, in a sentence: the
#: dashboard's form offers them as choices.
POLICY_CHOICES = {
    "overlap": {
        "skip": "no new run is sent while one is open",
        "allow": "a new run is sent beside the open one",
        "buffer_one": "one new run waits, and starts when the open one ends",
        "buffer_all": "every new run waits its turn, each starting when the one before ends",
        "replace": "the open run is revoked and the new one sent",
    },
    "replace_with": {
        "terminate": "the open run is revoked, and terminated where it executes",
        "revoke": "a run not started yet is revoked; a started one finishes beside the new",
    },
    "catchup": {
        "latest": "the latest missed occurrence runs, once",
        "all": "every missed occurrence runs, oldest first",
        "none": "missed occurrences are counted; none runs",
    },
    "on_overrun": {
        "none": "an overrun is alerted, and the run goes on",
        "revoke": "the run is revoked as well",
        "terminate": "the run is revoked and its process terminated",
    },
}

#: Values a policy that also takes durations is often given, offered as suggestions, each
#: with what it does.
POLICY_SUGGESTIONS = {
    "expires": {
        "next": "a run not started by the following occurrence expires then",
        "never": "a run waits for a worker however long it takes",
        "10m": "a run not started 10 minutes after it was sent expires",
        "1h": "a run not started an hour after it was sent expires",
    }
}


#: The definition fields of a schedule besides the policies, and what each takes.
DEFINITION_HELP = {
    "name": "A unique name: 1 to 200 characters, no control characters, no spaces at either end.",
    "task": "The registered Celery task name.",
    "timer": "'*/5 * * * *', '@daily', 'every 30s', 'every 1h after completion', 'at <ISO time>'.",
    "args": "Positional arguments, a JSON list.",
    "kwargs": "Keyword arguments, a JSON object.",
    "timezone": "The IANA zone the timer is read in. Default: the app's timezone, else UTC.",
    "queue": "The queue to send runs to.",
    "options": "apply_async options, a JSON object (queue, priority, expires, headers...).",
    "labels": "Labels to filter and act on the schedule by: a list, or text separated by commas.",
    "enabled": "false creates it paused. Default: true.",
    "anchor": "Where an interval timer's grid starts (ISO-8601 with offset). Default: now.",
    "allow_unknown_task": "Accept a task name this app does not register.",
    "signature": "A Celery canvas sent instead of the task alone: a signature with its "
    "options, a chain, a group or a chord, in Celery's JSON form (json.dumps(signature)); "
    "one run covers it all. 'none' on an edit sends the task alone again.",
}


#: The fields of a calendar (``bridge calendar add``, ``POST /calendars``), and what each takes.
CALENDAR_HELP = {
    "name": "A unique name: 1 to 100 letters, digits or _.- (starting with a letter or digit).",
    "dates": "Whole local days, YYYY-MM-DD, separated by commas (or a list).",
    "ranges": "Spans START/END, each a date (the whole day, both ends included) or a local "
    "date and time YYYY-MM-DDTHH:MM (from START up to END); a lone date is that day; "
    "repeat for several.",
    "cron": "A 5-field cron expression: the minutes it matches are excluded "
    "('* * 25 12 *' is all of 25 December).",
    "timezone": "The IANA zone its days and times are read in. Default: the app's timezone.",
    "replace": "Write over the calendar of this name (its schedules skip the new days).",
}
