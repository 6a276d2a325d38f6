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

# stop_pid PIDFILE WHAT SECONDS: SIGTERM to the pid the file names, then wait (at most SECONDS) for
# it to exit; the file goes (and its .own marker). The caller defines say and die.
stop_pid() {
    local pidfile=$1 what=$2 limit=$3 pid
    [ -f "$pidfile" ] || return 0
    pid=$(<"$pidfile")
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        say "stopping $what (pid $pid)"
        kill -TERM "$pid"
        local deadline=$((SECONDS + limit))
        while kill -0 "$pid" 2>/dev/null; do
            [ "$SECONDS" -lt "$deadline" ] || die "$what (pid $pid) still running after ${limit}s"
            sleep 0.2
        done
    fi
    rm -f "$pidfile" "$pidfile.own"
}
