#!/usr/bin/env bash
# completion_test.sh COMPLETION EXECUTABLE: sources the bash completion and asks it what it offers for a
# few command lines, as bash would at a TAB.
set -u
source "$1"
executable=$2
failures=0
offers() {  # offers EXPECTED WORD...: the completion of the last word must include EXPECTED
  local expected=$1
  shift
  COMP_WORDS=("$executable" "$@")
  COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
  COMPREPLY=()
  _normcheck
  if [[ " ${COMPREPLY[*]} " == *" $expected "* ]]; then
    echo "ok: '${*}' offers $expected"
  else
    echo "FAIL: '${*}' offers [${COMPREPLY[*]}], not $expected"
    failures=$((failures + 1))
  fi
}
offers check ch
offers collectives col
offers help he
offers --junit check --ju
offers --objective prove --obj
offers weighted_token_mean prove --objective wei
offers float32 suggest --dtype float3
offers derivation demo der
offers simulate help sim
exit $((failures > 0))
