# Sourced by the *_errors.sh scripts, after they set `cmd` (the program and
# any arguments every run takes). `expect WANT ARGS...` runs "${cmd[@]}" ARGS
# with a memory cap and a time limit, and wants a non-zero exit that is
# neither a signal nor the time limit, with WANT in its stderr; `record`
# counts any other check; `finish` prints the summary and fails if anything
# did.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
pass=0
fail=0

# record OK_MESSAGE FAIL_MESSAGE BAD: counts and prints a check, failed
# when BAD is not 0.
record() {
  if [ "$3" -eq 0 ]; then
    echo "ok: $1"
    pass=$((pass + 1))
  else
    echo "FAIL: $2"
    fail=$((fail + 1))
  fi
}

expect() { # want_in_stderr args...
  local want=$1
  shift
  local err rc=0 bad=0
  err=$(ulimit -v 4000000; timeout 20 "${cmd[@]}" "$@" 2>&1 >/dev/null) || rc=$?
  { [ $rc -eq 0 ] || [ $rc -ge 124 ] || ! grep -qF -- "$want" <<<"$err"; } && bad=1
  record "$* -> rc=$rc: $(grep -F -- "$want" <<<"$err" | head -n 1)" \
    "$* -> rc=$rc, wanted an error naming '$want', got: $(tail -n 2 <<<"$err")" $bad
}

finish() {
  echo "summary: $pass passed, $fail failed"
  [ $fail -eq 0 ]
}
