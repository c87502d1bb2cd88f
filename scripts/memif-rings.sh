# Sourced by the bench scripts. memif_rsize PLANES prints the memif rsize (log2 of a ring's
# slots) that keeps about 1024 slots over all planes: a ring's slots take frames in turn, so
# more slots cycle more frame data through the caches (why: config/nic/memif-requester.conf).
memif_rsize() {
  local rsize=10 k
  for ((k = $1; k > 1; k /= 2)); do rsize=$((rsize - 1)); done
  echo "$rsize"
}
