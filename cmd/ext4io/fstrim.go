package main

import (
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/ext4io/ext4io"
)

// cmdFstrim discards the free space of an image, as fstrim(8) does for a
// mounted file system (FITRIM): on a file, holes are punched; on a block
// device, BLKDISCARD; over NBD, NBD_CMD_TRIM.
func cmdFstrim(args []string, w io.Writer) error {
	fs := newFlags("fstrim")
	verbose := fs.Bool("v", false, "print the number of bytes discarded, as fstrim -v")
	offStr := fs.String("offset", "0", "byte offset in the file system where to start looking for free space")
	lenStr := fs.String("length", "", "number of bytes to search for free space (default: to the end)")
	minStr := fs.String("minimum", "0", "discard only free runs of at least this many bytes")
	args, err := parseArgs(fs, args, 1, 1)
	if err != nil {
		return err
	}
	off, err := parseSize0(*offStr)
	if err != nil {
		return fmt.Errorf("%w: --offset: %w", errUsage, err)
	}
	length := int64(math.MaxInt64)
	if *lenStr != "" {
		if length, err = parseSize0(*lenStr); err != nil {
			return fmt.Errorf("%w: --length: %w", errUsage, err)
		}
	}
	minLen, err := parseSize0(*minStr)
	if err != nil {
		return fmt.Errorf("%w: --minimum: %w", errUsage, err)
	}
	return withWritable(args[0], func(v *ext4io.Volume) error {
		n, err := v.Trim(off, length, minLen)
		if err != nil {
			return err
		}
		if *verbose {
			fmt.Fprintf(w, "%s: %s (%d bytes) trimmed\n", args[0], humanBytes(n), n)
		}
		return nil
	})
}

// humanBytes formats n as util-linux's size_to_human_string does for
// fstrim -v: "0 B", "512 B", "1.5 MiB", "2 GiB" (one decimal, dropped
// when zero).
func humanBytes(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	i := 0
	for i < len(units)-1 && n>>(10*(i+1)) > 0 {
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%d B", n)
	}
	s := fmt.Sprintf("%.1f", float64(n)/float64(int64(1)<<(10*i)))
	s = strings.TrimSuffix(s, ".0")
	return s + " " + units[i]
}
