#!/bin/sh
# A FAKE agent for tests: it starts a background child, writes the child's
# pid to $1 and never returns, so the stage's timeout must end both.
sleep 300 &
echo $! > "$1"
sleep 300
