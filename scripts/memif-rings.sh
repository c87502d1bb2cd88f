# Sourced by the bench scripts and test/nic/pair_test.sh. memif_rsize PLANES prints the memif rsize (log2 of a ring's
# slots) that keeps about 1024 slots over all planes: a ring's slots take frames in turn, so
# more slots cycle more frame data through the caches (why: config/nic/memif-requester.conf).
memif_rsize() {
  local rsize=10 k
  for ((k = $1; k > 1; k /= 2)); do rsize=$((rsize - 1)); done
  echo "$rsize"
}

# memif_roles ZC sets the memif roles of a workload pair's two ends:
# MEMIF_RESPONDER_ROLE and MEMIF_REQUESTER_ROLE (--vdev arguments), and
# MEMIF_RESPONDER_EAL. The responder is the memif server; with ZC=1 it is a
# zero-copy client instead, which takes frames where the requester's memif
# wrote them. Zero-copy needs its EAL memory in one file, and the server (then
# the requester) must be started first: a client only joins a socket that
# exists.
memif_roles() {
  if (($1)); then
    MEMIF_RESPONDER_ROLE="role=client,zero-copy=yes" MEMIF_REQUESTER_ROLE="role=server"
    MEMIF_RESPONDER_EAL=(--single-file-segments)
  else
    MEMIF_RESPONDER_ROLE="role=server" MEMIF_REQUESTER_ROLE="role=client"
    MEMIF_RESPONDER_EAL=()
  fi
}
