package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ext4io/ext4io/blockdev"
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
