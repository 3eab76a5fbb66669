//go:build unix

package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestReadDirEntriesStatAsLstat: the listing's stat of each entry (fstat
// of a regular file it opened, fstatat of the others) is what os.Lstat
// says: type and mode bits with setuid, setgid and sticky, size, times,
// owner, identity and device number. Regular files come open, others
// not; a file it may not open comes with the error, stat'ed all the same.
func TestReadDirEntriesStatAsLstat(t *testing.T) {
	dir := t.TempDir()
	p := func(name string) string { return filepath.Join(dir, name) }
	require.NoError(t, os.WriteFile(p("reg"), []byte("regular file"), 0o644))
	require.NoError(t, os.Chmod(p("reg"), 0o4755|os.ModeSetuid))
	require.NoError(t, os.Mkdir(p("dir"), 0o755))
	require.NoError(t, os.Chmod(p("dir"), 0o1777|os.ModeSticky|os.ModeSetgid))
	require.NoError(t, os.Symlink("reg", p("link")))
	require.NoError(t, unix.Mkfifo(p("fifo"), 0o640))
	if os.Geteuid() == 0 {
		require.NoError(t, mknodDev(unix.Mknod, p("null"), unix.S_IFCHR|0o600, unix.Mkdev(1, 3)))
	}
	require.NoError(t, os.WriteFile(p("noread"), []byte("x"), 0o000))

	top := &srcEntry{host: dir}
	var names []string
	require.NoError(t, readDirEntries(top, func(k *srcEntry) bool {
		defer k.closeIn()
		names = append(names, k.name)
		want, err := os.Lstat(k.host)
		require.NoError(t, err)
		assert.Equal(t, want.Mode(), k.fi.Mode(), k.name)
		assert.Equal(t, want.Size(), k.fi.Size(), k.name)
		assert.True(t, want.ModTime().Equal(k.fi.ModTime()), k.name)
		assert.Equal(t, want.IsDir(), k.fi.IsDir(), k.name)
		assert.Equal(t, k.name, k.fi.Name())
		assert.Equal(t, 1, k.depth)
		ws, gs := want.Sys().(*syscall.Stat_t), k.fi.Sys().(*syscall.Stat_t)
		assert.Equal(t, ws.Ino, gs.Ino, k.name)
		assert.Equal(t, ws.Dev, gs.Dev, k.name)
		assert.Equal(t, ws.Rdev, gs.Rdev, k.name)
		wa, wu, wg, _ := hostStat(want)
		ga, gu, gg, ok := hostStat(k.fi)
		assert.True(t, ok)
		assert.Equal(t, []int{wu, wg}, []int{gu, gg}, k.name)
		assert.True(t, wa.Equal(ga), k.name)
		readable := k.name == "reg" || k.name == "noread" && os.Geteuid() == 0
		assert.Equal(t, readable, k.in != nil, "%s: open", k.name)
		assert.Equal(t, k.name == "noread" && !readable, k.openErr != nil, "%s: %v", k.name, k.openErr)
		return true
	}))
	want := []string{"dir", "fifo", "link", "noread", "reg"}
	if os.Geteuid() == 0 {
		want = []string{"dir", "fifo", "link", "noread", "null", "reg"}
	}
	assert.Equal(t, want, names, "sorted by name")
}

// TestMkfsDirHostCalls pins the host system calls per file of mkfs -d:
// each regular file is opened and stat'ed once by the walk and once by
// the import (no lstat before an open, no fstat after it but for the
// size check of a file copied by ranges), every other
// entry stat'ed once by each, and a file read ahead whole takes no
// SEEK_DATA or SEEK_HOLE (only the file over aheadMax is copied by its
// data ranges); a regular file's attributes are listed through its
// descriptor.
func TestMkfsDirHostCalls(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	regular, others, dirs := 0, 0, 1 // the top is listed, not stat'ed by a listing
	files := map[string][]byte{}
	for d := range 3 {
		sub := fmt.Sprintf("d%d", d)
		require.NoError(t, os.MkdirAll(filepath.Join(src, sub), 0o755))
		dirs++
		others++
		for f := range 7 {
			name := fmt.Sprintf("%s/f%d", sub, f)
			data := bytes.Repeat([]byte(name+"\n"), 1+f*300)
			require.NoError(t, os.WriteFile(filepath.Join(src, name), data, 0o644))
			files[name] = data
			regular++
		}
	}
	// A small sparse file, read whole (its hole as zeroes), and one over
	// aheadMax, copied by its ranges.
	sparse := make([]byte, 40<<10)
	copy(sparse, "head")
	copy(sparse[len(sparse)-4:], "tail")
	f, err := os.Create(filepath.Join(src, "sparse"))
	require.NoError(t, err)
	_, err = f.WriteAt([]byte("head"), 0)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte("tail"), int64(len(sparse))-4)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	files["sparse"] = sparse
	big := bytes.Repeat([]byte("0123456789abcdef"), (aheadMax+8192)/16)
	require.NoError(t, os.WriteFile(filepath.Join(src, "big"), big, 0o644))
	files["big"] = big
	regular += 2
	require.NoError(t, os.Symlink("big", filepath.Join(src, "link")))
	others++

	img := filepath.Join(dir, "img")
	open, stat, seek, xpath := hostCalls.open.Load(), hostCalls.stat.Load(), hostCalls.seek.Load(), hostCalls.xattrPath.Load()
	out, errOut, code := runCmd(t, "mkfs", "-d", src, img, "32M")
	require.Zero(t, code, "mkfs -d: %s %s", out, errOut)
	open, stat, seek = hostCalls.open.Load()-open, hostCalls.stat.Load()-stat, hostCalls.seek.Load()-seek
	xpath = hostCalls.xattrPath.Load() - xpath
	assert.Equal(t, int64(2*(regular+dirs)), open, "opens: %d regular files, %d directories listed, two passes", regular, dirs)
	// One more: the file over aheadMax is checked not to have shrunk
	// after its copy.
	assert.Equal(t, int64(2*(regular+others)+1), stat, "stats: %d regular files, %d other entries, two passes", regular, others)
	assert.LessOrEqual(t, seek, int64(2), "seeks: only the file over aheadMax (SEEK_DATA, SEEK_HOLE)")
	if runtime.GOOS == "linux" {
		// Regular files' attributes are listed through their descriptors;
		// by path only the top and the other entries, in each pass (the
		// import lists them only if the walk found some, as a host with
		// security labels has).
		assert.LessOrEqual(t, xpath, int64(2*(others+1)), "attribute listings by path: %d other entries and the top", others)
	}

	dev, err := blockdev.OpenFile(img, true)
	require.NoError(t, err)
	defer dev.Close()
	v, err := ext4io.Open(dev, ext4io.Options{})
	require.NoError(t, err)
	defer v.Close()
	for name, data := range files {
		got, err := v.ReadFile(name)
		require.NoError(t, err, name)
		assert.True(t, bytes.Equal(data, got), "%s: contents", name)
	}
}

// TestMkfsDirDeepByPath: directories nested deeper than maxDirFDs are
// listed, stat'ed and opened by their full paths, and copied the same.
func TestMkfsDirDeepByPath(t *testing.T) {
	old := maxDirFDs
	maxDirFDs = 2
	defer func() { maxDirFDs = old }()
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	files := map[string][]byte{}
	deep := src
	for d := range 5 {
		deep = filepath.Join(deep, fmt.Sprintf("d%d", d))
		require.NoError(t, os.MkdirAll(deep, 0o755))
		name := strings.TrimPrefix(filepath.Join(deep, "f"), src+"/")
		files[name] = []byte(name)
		require.NoError(t, os.WriteFile(filepath.Join(src, name), files[name], 0o644))
	}
	require.NoError(t, os.Symlink("f", filepath.Join(deep, "l")))
	img := filepath.Join(dir, "img")
	out, errOut, code := runCmd(t, "mkfs", "-d", src, img, "32M")
	require.Zero(t, code, "mkfs -d: %s %s", out, errOut)

	dev, err := blockdev.OpenFile(img, true)
	require.NoError(t, err)
	defer dev.Close()
	v, err := ext4io.Open(dev, ext4io.Options{})
	require.NoError(t, err)
	defer v.Close()
	for name, data := range files {
		got, err := v.ReadFile(name)
		require.NoError(t, err, name)
		assert.Equal(t, data, got, name)
	}
	target, err := v.Readlink(strings.TrimPrefix(filepath.Join(deep, "l"), src+"/"))
	require.NoError(t, err)
	assert.Equal(t, "f", target)
}

// TestReadDirEntriesDeepFDs: listings nested deeper than maxDirFDs hold
// no descriptor while their entries are handled, so a deep tree does not
// hold one per level.
func TestReadDirEntriesDeepFDs(t *testing.T) {
	if _, err := os.Stat("/proc/self/fd"); err != nil {
		t.Skip("no /proc/self/fd:", err)
	}
	old := maxDirFDs
	maxDirFDs = 2
	defer func() { maxDirFDs = old }()
	dir := t.TempDir()
	deep := dir
	for d := range 8 {
		deep = filepath.Join(deep, fmt.Sprintf("d%d", d))
	}
	require.NoError(t, os.MkdirAll(deep, 0o755))
	open := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		require.NoError(t, err)
		return len(ents)
	}
	fds := map[int]int{} // open descriptors while an entry at each depth is handled
	var list func(e *srcEntry)
	list = func(e *srcEntry) {
		require.NoError(t, readDirEntries(e, func(k *srcEntry) bool {
			fds[k.depth] = open()
			if k.fi.IsDir() {
				list(k)
			}
			return true
		}))
	}
	list(&srcEntry{host: dir})
	require.Len(t, fds, 8)
	for d := 3; d <= 8; d++ {
		assert.Equal(t, fds[2], fds[d], "descriptors open at depth %d, against depth 2", d)
	}
	assert.Equal(t, fds[1]+1, fds[2], "depth 1 and 2: one more listing through a descriptor")
}

// mknodDev calls mknod, whose device number is an int on Linux and a
// uint64 on the BSDs.
func mknodDev[D int | uint64](mknod func(string, uint32, D) error, path string, mode uint32, dev uint64) error {
	return mknod(path, mode, D(dev))
}
