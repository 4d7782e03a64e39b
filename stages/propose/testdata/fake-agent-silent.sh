#!/bin/sh
# A FAKE agent for tests: it reads the skill file and writes nothing.
cat "$WHALE_WORKSPACE/SKILL.md" > /dev/null
echo "fake agent: no ideas today"
