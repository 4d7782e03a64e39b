// Package slurmtest runs a real one-node Slurm cluster (slurm-wlm 22.05 and
// munge from Debian) for integration tests.
//
// Shared returns the cluster, starting it on first use; a package that
// calls it calls Main from its TestMain. Everything lives under
// $TMPDIR/whale-slurmtest: the cluster's slurm.conf (found by commands
// through SLURM_CONF, never /etc/slurm), its own munged with its own key
// and socket, state, spool, logs and pid files, on free loopback ports, so
// a Slurm already on the machine is left alone.
//
// Sharing between test binaries (`go test ./...` runs packages in
// parallel, and one node can serve one cluster): a process changes the
// cluster only while holding an exclusive flock on whale-slurmtest/lock,
// and uses it while holding a shared flock on whale-slurmtest/inuse. The
// first process starts a watchdog (the test binary run again with
// WHALE_SLURMTEST_WATCHDOG set, which Main recognises), then munged,
// slurmctld and slurmd, each in its own session, and records their pids in
// cluster/info.json; later processes find them there and join. Nobody
// waits for anybody at the end: Main only drops its shared lock. The
// watchdog blocks on an exclusive lock of inuse, so it wakes when the last
// user is gone, however it ended (killed test binaries drop their locks
// too), cancels the jobs, stops the daemons by pid (SIGTERM, then SIGKILL
// after 5 s) and removes the folder. A joiner that finds a daemon or the
// watchdog dead kills what is left (found through /proc by the cluster's
// SLURM_CONF) and starts afresh.
//
// When the daemons are missing: with CI=true or WHALE_SLURM_INSTALL=1 they
// are installed (as root, `apt-get install -y slurm-wlm munge`); otherwise
// the tests are skipped with the reason. Under CI=true any failure to
// install or start fails the tests. In -short mode they are skipped.
package slurmtest
