#!/bin/sh
# A FAKE agent for tests: it starts a background child (a shell whose
# command line carries the marker $1, so the test finds it among the
# machine's processes) and never returns, so the stage's timeout must end
# both.
sh -c 'sleep 300; exit 0' "$1" &
sleep 300
