package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev"
)

func cmdMkfs(args []string, w io.Writer) error {
	fs := newFlags("mkfs")
	bs := fs.Int("b", 4096, "block size in bytes: 1024, 2048, 4096, ... 65536")
	features := fs.String("O", "", "features to add, or with ^ to remove, comma-separated, as mkfs.ext4 -O")
	label := fs.String("L", "", "volume label")
	isize := fs.Int("I", 0, "inode size in bytes (0: the default)")
	srcDir := fs.String("d", "", "copy this directory tree into the new filesystem")
	args, err := parseArgs(fs, args, 2, 2)
	if err != nil {
		return err
	}
	img := args[0]
	size, err := parseSize(args[1])
	if err != nil {
		return err
	}
	dev, err := blockdev.CreateFile(img, size)
	if err != nil {
		return err
	}
	defer dev.Close()
	opts := ext4io.FormatOptions{BlockSize: *bs, Features: *features, Label: *label, InodeSize: *isize}
	if err := ext4io.Format(dev, opts); err != nil {
		return err
	}
	if *srcDir != "" {
		v, err := ext4io.Open(dev, ext4io.Options{Writable: true})
		if err != nil {
			return err
		}
		if err := importTree(v, *srcDir); err != nil {
			v.Close()
			return fmt.Errorf("importing %s: %w", *srcDir, err)
		}
		if err := v.Close(); err != nil {
			return err
		}
	}
	if err := dev.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "formatted %s: %d bytes, %d-byte blocks\n", img, size, *bs)
	return nil
}

// parseSize parses sizes like 4096, 64M, 2G, 1T (binary units).
func parseSize(s string) (int64, error) {
	mult := int64(1)
	u := strings.ToUpper(s)
	for _, suf := range []struct {
		s string
		m int64
	}{{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40}, {"P", 1 << 50}} {
		if strings.HasSuffix(u, suf.s) || strings.HasSuffix(u, suf.s+"B") || strings.HasSuffix(u, suf.s+"IB") {
			mult = suf.m
			u = strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(u, "IB"), "B"), suf.s)
			break
		}
	}
	n, err := strconv.ParseInt(u, 10, 64)
	if err != nil || n <= 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("bad size %q: want a positive number with an optional K, M, G, T or P suffix", s)
	}
	return n * mult, nil
}
