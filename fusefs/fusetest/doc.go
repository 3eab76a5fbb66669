// Package fusetest holds helpers for tests that use FUSE mounts.
//
// A FUSE server that stops answering leaves every process that touches
// its mount blocked in the kernel (request_wait_answer), and a request the
// server has already read cannot be interrupted, not even by SIGKILL: a test
// that serves a mount in its own process, or waits on one served by a
// child, would hang until the test binary's timeout and then fail to exit.
// Watch turns such a hang into a failed test by aborting the connection
// (/sys/fs/fuse/connections/N/abort) after a deadline, which fails the
// outstanding requests with ECONNABORTED and every later one with ENOTCONN.
// Mounted tells whether a FUSE file system is mounted at a directory
// without asking its server.
//
// Its helpers are for Linux only.
package fusetest
