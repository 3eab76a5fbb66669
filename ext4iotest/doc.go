// Package ext4iotest helps test code built on ext4io and on its lower
// packages (blockdev, alloc, extent, esc, iomap, journal): the external
// oracles, and crash-point sweeps.
//
//   - e2fsprogs: Fsck (e2fsck -fn must call the image clean), FsckDev for an
//     in-memory device, Mkfs, Debugfs, Extents, Dump. Each skips the test,
//     with one line, when the tool is not installed.
//   - Linux: Mount loop-mounts an image (and unmounts it at cleanup). It
//     skips the test when not root, in -short mode, or when the kernel
//     refuses the mount.
//   - Crashes: CrashSweep runs a workload on a recording device
//     (errordev.Recorder), then crashes at every flush (or every write),
//     and hands each crashed image to a check. Identical crash images are
//     checked once (told apart by an xxhash digest of their contents).
//
// ext4iotest does not import the root package, so the root package's own
// internal tests can use it too. Its helpers take a testing.TB and are
// safe to call from parallel tests.
package ext4iotest
