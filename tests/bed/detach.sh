# shellcheck shell=bash
# Sourced by the scripts that start daemons. detach CMD...: runs CMD in a session of its own
# (it outlives the shell or make that started it), in the background, with none of the starter's
# open files but stdin/stdout/stderr (the caller redirects those). A daemon that kept them would
# keep whatever they hold: started under `flock /tmp/pkl-tests.lock make test`, containerd would
# hold the machine-wide test lock for as long as it runs.
detach() {
  (
    for fd in /proc/$BASHPID/fd/*; do
      n=${fd##*/}
      if [ "$n" -gt 2 ] 2>/dev/null; then eval "exec $n>&-"; fi
    done
    exec setsid "$@"
  ) &
}
