package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/ext4iotest"
	"github.com/stretchr/testify/require"
)

func TestRun(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(&out))
	require.Contains(t, out.String(), "read back after reopening: all equal")
}

// TestImage runs the demo on an image made by mkfs.ext4, then checks it
// with e2fsck and debugfs, and, where mounting works, has Linux read the
// blobs.
func TestImage(t *testing.T) {
	img := filepath.Join(t.TempDir(), "img")
	ext4iotest.Mkfs(t, img, "64M")
	dev, err := blockdev.OpenFile(img, false)
	require.NoError(t, err)
	var out bytes.Buffer
	require.NoError(t, demo(dev, &out), out.String())
	require.NoError(t, dev.Close())

	ext4iotest.Fsck(t, img)
	for name, want := range blobs() {
		require.Equal(t, want, ext4iotest.Dump(t, img, name), "debugfs dump %s", name)
	}
	ls := ext4iotest.Debugfs(t, img, false, "ls -l /")
	for name := range blobs() {
		require.True(t, strings.Contains(ls, name), "debugfs ls lacks %s:\n%s", name, ls)
	}

	dir := ext4iotest.Mount(t, img, true)
	for name, want := range blobs() {
		got, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err)
		require.Equal(t, want, got, "Linux reads %s", name)
	}
}

// TestCrashSweep crashes the engine after every device operation (60
// points spread over the log) of a run that puts the three blobs, keeping
// a random half of the unflushed writes and tearing the last one in 4 KiB
// units: at every
// point the store reopens (replaying its journal), closes clean, e2fsck
// accepts the image, and each blob is either absent or whole.
func TestCrashSweep(t *testing.T) {
	start := memdev.New(64 << 20)
	require.NoError(t, ext4io.Format(start, ext4io.FormatOptions{}))
	workload := func(dev blockdev.Device) error { return demo(dev, io.Discard) }
	checked := ext4iotest.CrashSweep(t, start, workload, func(t *testing.T, dev *memdev.Device, rep errordev.CrashReport) {
		s, err := Open(dev)
		require.NoError(t, err, "open after the crash")
		require.NoError(t, s.Close())
		img := ext4iotest.ImageOf(t, dev)
		ext4iotest.Fsck(t, img)
		ls := ext4iotest.Debugfs(t, img, false, "ls /")
		for name, want := range blobs() {
			if strings.Contains(ls, name) {
				require.Equal(t, want, ext4iotest.Dump(t, img, name), "blob %s after %v", name, rep)
			}
		}
	}, ext4iotest.SweepOptions{EveryOp: true, CrashAt: errordev.CrashAtOptions{KeepProb: 0.5, Tear: true, TearUnit: 4096}, MaxPoints: 60})
	require.Greater(t, checked, 3)
}
