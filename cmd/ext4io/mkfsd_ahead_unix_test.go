//go:build unix

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSrcStream reads a tree ahead: entries in sorted order, each
// directory's own entries after it and an end item after them; small
// files whole (holes as zeroes), a file over aheadMax handed over open, a
// further name of a hard-linked file with nothing read. Stopping part way
// closes every file the reader opened.
func TestSrcStream(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, b []byte) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), b, 0o644))
	}
	small := []byte("small file\n")
	big := bytes.Repeat([]byte("0123456789abcdef"), (aheadMax+4096)/16)
	write("a", small)
	write("big", big)
	require.NoError(t, os.Mkdir(filepath.Join(dir, "d"), 0o755))
	write("d/x", []byte("x"))
	require.NoError(t, os.Link(filepath.Join(dir, "a"), filepath.Join(dir, "z-link")))
	// A small sparse file: data, a hole, data.
	f, err := os.Create(filepath.Join(dir, "sparse"))
	require.NoError(t, err)
	_, err = f.WriteAt([]byte("head"), 0)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte("tail"), aheadMax-4)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	sparse := make([]byte, aheadMax)
	copy(sparse, "head")
	copy(sparse[aheadMax-4:], "tail")

	// Into a used buffer: the holes are zeroed.
	in, err := openSource(filepath.Join(dir, "sparse"))
	require.NoError(t, err)
	buf := bytes.Repeat([]byte{0xff}, aheadMax)
	b, err := readWhole(in, buf)
	require.NoError(t, err)
	require.NoError(t, in.Close())
	assert.True(t, bytes.Equal(sparse, b), "sparse file read into a used buffer")

	fi, err := os.Lstat(dir)
	require.NoError(t, err)
	s := newSrcStream(&srcEntry{host: dir, fi: fi}, true)
	type got struct {
		name string
		data []byte
		open bool
	}
	var items []got
	for {
		it, ok := s.next()
		require.True(t, ok)
		require.NoError(t, it.err)
		if it.e == nil {
			items = append(items, got{name: "<end>"})
			if len(items) > 1 && items[len(items)-2].name == "z-link" {
				break
			}
			continue
		}
		g := got{name: it.e.name, open: it.in != nil}
		if it.data != nil {
			g.data = bytes.Clone(it.data)
		}
		items = append(items, g)
		s.release(&it)
	}
	s.stop()
	assert.Equal(t, []got{
		{name: "a", data: small},
		{name: "big", open: true},
		{name: "d"},
		{name: "x", data: []byte("x")},
		{name: "<end>"},
		{name: "sparse", data: sparse},
		{name: "z-link"},
		{name: "<end>"},
	}, items)

	// Stopped after one item: the files read ahead are closed.
	fds := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Skip("no /proc/self/fd")
		}
		return len(ents)
	}
	before := fds()
	for range 3 {
		s := newSrcStream(&srcEntry{host: dir, fi: fi}, false)
		it, ok := s.next()
		require.True(t, ok)
		s.release(&it)
		s.stop()
	}
	assert.Equal(t, before, fds())
}
