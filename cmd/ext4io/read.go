package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/layout"
)

func openImage(path string) (*ext4io.Volume, error) {
	return openImageOpts(path, ext4io.Options{})
}

// openImageOpts opens an image (a file, a block device or an NBD URI),
// saying plainly when it is not ext4 at all rather than how its
// superblock failed to decode.
func openImageOpts(path string, opts ext4io.Options) (*ext4io.Volume, error) {
	v, err := ext4io.OpenImage(path, opts)
	if err != nil && (errors.Is(err, ext4io.ErrNotExt4) || notExt4(path)) {
		return nil, fmt.Errorf("%s: not an ext4 file system (bad magic)", path)
	}
	return v, err
}

// notExt4 reports whether path is a readable file without the ext4
// superblock magic.
func notExt4(path string) bool {
	if !maybeImage(path) {
		return false
	}
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || fi.IsDir() {
		return false
	}
	var b [2]byte
	if _, err := f.ReadAt(b[:], layout.SuperblockOffset+0x38); err != nil {
		return err == io.EOF
	}
	return binary.LittleEndian.Uint16(b[:]) != layout.SuperMagic
}

func cmdInfo(args []string, w io.Writer) error {
	args, err := noFlags("info", args, 1)
	if err != nil {
		return err
	}
	v, err := openImage(args[0])
	if err != nil {
		return err
	}
	defer v.Close()
	sb := v.Superblock()
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	p := func(k string, f string, a ...any) { fmt.Fprintf(tw, "%s:\t"+f+"\n", append([]any{k}, a...)...) }
	p("Volume name", "%s", printable(sb.Label()))
	p("UUID", "%x-%x-%x-%x-%x", sb.UUID[0:4], sb.UUID[4:6], sb.UUID[6:8], sb.UUID[8:10], sb.UUID[10:16])
	p("Features", "%s", strings.Join(layout.FeatureNames(sb.FeatureCompat, sb.FeatureRoCompat, sb.FeatureIncompat), " "))
	p("Block size", "%d", sb.BlockSize())
	p("Block count", "%d", sb.BlocksCount)
	p("Free blocks", "%d", sb.FreeBlocksCount)
	p("Reserved blocks", "%d", sb.RBlocksCount)
	p("Inode count", "%d", sb.InodesCount)
	p("Free inodes", "%d", sb.FreeInodesCount)
	p("Inode size", "%d", sb.InodeSizeBytes())
	p("Groups", "%d", sb.GroupCount())
	p("Blocks per group", "%d", sb.BlocksPerGroup)
	p("Inodes per group", "%d", sb.InodesPerGroup)
	p("First data block", "%d", sb.FirstDataBlock)
	if sb.HasCompat(layout.CompatHasJournal) {
		p("Journal inode", "%d", sb.JournalInum)
	}
	state := "clean"
	if sb.State&layout.StateValid == 0 {
		state = "not clean"
	}
	if sb.State&layout.StateErrors != 0 {
		state += " with errors"
	}
	p("State", "%s", state)
	if r := v.Recovery(); r != nil {
		// A read-only open replays into memory: what this prints is the
		// replayed file system; the image itself still needs the replay.
		p("Journal", "needs recovery: %d transactions replayed in memory only (ext4io recover IMAGE writes them)", r.Transactions)
	}
	p("Mount count", "%d", sb.MntCount)
	p("Created", "%s", fmtTime(sb.MkfsTime))
	p("Last write", "%s", fmtTime(sb.Wtime))
	if sb.MetadataCsum() {
		p("Checksum", "crc32c %#08x", sb.Checksum)
	}
	return tw.Flush()
}

func fmtTime(sec int64) string {
	if sec == 0 {
		return "n/a"
	}
	return time.Unix(sec, 0).UTC().Format(time.RFC3339)
}

func cmdLs(args []string, w io.Writer) error {
	fs := newFlags("ls")
	long := fs.Bool("l", false, "long listing: mode, links, owner, group, size, modification time, name (-> target)")
	inum := fs.Bool("i", false, "print each entry's inode number first")
	args, err := parseArgs(fs, args, 1, 2)
	if err != nil {
		return err
	}
	dir := "/"
	if len(args) == 2 {
		dir = args[1]
	}
	v, err := openImage(args[0])
	if err != nil {
		return err
	}
	defer v.Close()
	fi, err := v.Lstat(dir)
	if err == nil && fi.Mode()&iofs.ModeSymlink != 0 && !*long {
		// Like ls: a symlink to a directory lists the directory, except
		// in the long form, which shows the link.
		if sfi, serr := v.Stat(dir); serr == nil && sfi.IsDir() {
			fi = sfi
		}
	}
	if err == nil && !fi.IsDir() {
		return lsLines(w, v, []lsEntry{{dir, dir, fi, nil}}, *long, *inum)
	}
	if err != nil {
		return err
	}
	// DirEntries reads only the entries (os's ReadDir would stat each),
	// so an entry that cannot be stat'ed is reported and ls goes on.
	ents, err := v.DirEntries(dir)
	if err != nil {
		return err
	}
	list := make([]lsEntry, len(ents))
	for i, e := range ents {
		p := path.Join(dir, e.Name)
		list[i] = lsEntry{name: e.Name, path: p}
		if *long || *inum {
			list[i].fi, list[i].err = v.Lstat(p)
		}
	}
	// Sorted by name, as ls does by default.
	slices.SortFunc(list, func(a, b lsEntry) int { return strings.Compare(a.name, b.name) })
	return lsLines(w, v, list, *long, *inum)
}

// lsEntry is one name to list; fi is nil unless it was needed.
type lsEntry struct {
	name, path string
	fi         *ext4io.FileInfo
	err        error
}

// lsLines prints the entries like ls (-l, -i). An entry that cannot be
// stat'ed is reported on stderr and the others are still listed; the
// result is then errReported.
func lsLines(w io.Writer, v *ext4io.Volume, list []lsEntry, long, inum bool) error {
	tw := tabwriter.NewWriter(w, 0, 0, 0, ' ', tabwriter.AlignRight)
	failed := false
	six := time.Now().AddDate(0, -6, 0)
	for _, e := range list {
		if e.err != nil {
			fmt.Fprintf(stderr, "ext4io ls: %s: %s\n", printable(e.name), oneLine(e.err))
			failed = true
			continue
		}
		var cols []string
		if inum {
			cols = append(cols, fmt.Sprint(e.fi.Ino))
		}
		name := printable(e.name)
		if long {
			t := e.fi.ModTime().Local()
			stamp := t.Format("Jan _2 15:04")
			if t.Before(six) || t.After(time.Now().Add(time.Hour)) {
				stamp = t.Format("Jan _2  2006")
			}
			cols = append(cols, lsMode(e.fi.IMode), fmt.Sprint(e.fi.Nlink), fmt.Sprint(e.fi.UID), fmt.Sprint(e.fi.GID),
				fmt.Sprint(e.fi.Size()), stamp)
			if e.fi.Mode()&iofs.ModeSymlink != 0 {
				if t, err := v.Readlink(e.path); err == nil {
					name += " -> " + printable(t)
				} else {
					fmt.Fprintf(stderr, "ext4io ls: %s: %s\n", printable(e.name), oneLine(err))
					failed = true
				}
			}
		}
		// Cells right-aligned, each with its separating space; the name
		// is not a cell, so it stays left-aligned.
		for _, c := range cols {
			fmt.Fprintf(tw, "%s \t", c)
		}
		fmt.Fprintf(tw, "%s\n", name)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if failed {
		return errReported
	}
	return nil
}

// lsMode formats a raw i_mode as ls -l does: the type letter, then rwx
// triples with s, S, t and T for setuid, setgid and sticky.
func lsMode(m uint16) string {
	b := []byte("?rwxrwxrwx")
	switch m & 0xF000 {
	case 0x8000:
		b[0] = '-'
	case 0x4000:
		b[0] = 'd'
	case 0xA000:
		b[0] = 'l'
	case 0x2000:
		b[0] = 'c'
	case 0x6000:
		b[0] = 'b'
	case 0x1000:
		b[0] = 'p'
	case 0xC000:
		b[0] = 's'
	}
	for i := 0; i < 9; i++ {
		if m&(1<<(8-i)) == 0 {
			b[1+i] = '-'
		}
	}
	special := func(bit uint16, at int, lower, upper byte) {
		if m&bit == 0 {
			return
		}
		if b[at] == 'x' {
			b[at] = lower
		} else {
			b[at] = upper
		}
	}
	special(0o4000, 3, 's', 'S')
	special(0o2000, 6, 's', 'S')
	special(0o1000, 9, 't', 'T')
	return string(b)
}

func cmdCat(args []string, w io.Writer) error {
	args, err := noFlags("cat", args, 2)
	if err != nil {
		return err
	}
	v, err := openImage(args[0])
	if err != nil {
		return err
	}
	defer v.Close()
	f, err := v.Open(args[1])
	if err != nil {
		return err
	}
	if fi, _ := f.Stat(); fi.IsDir() {
		return fmt.Errorf("%s: is a directory", args[1])
	}
	_, err = io.Copy(w, io.NewSectionReader(f, 0, f.Size()))
	return err
}

func cmdStat(args []string, w io.Writer) error {
	args, err := noFlags("stat", args, 2)
	if err != nil {
		return err
	}
	v, err := openImage(args[0])
	if err != nil {
		return err
	}
	defer v.Close()
	fi, err := v.Lstat(args[1])
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	p := func(k string, f string, a ...any) { fmt.Fprintf(tw, "%s:\t"+f+"\n", append([]any{k}, a...)...) }
	ts := func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05.000000000 MST") }
	p("Inode", "%d", fi.Ino)
	p("Mode", "%s (%#o)", fi.Mode(), fi.IMode)
	p("Links", "%d", fi.Nlink)
	p("UID/GID", "%d/%d", fi.UID, fi.GID)
	p("Size", "%d", fi.Size())
	p("Blocks (512B)", "%d", fi.Blocks)
	p("Flags", "%#x", fi.Flags)
	p("Generation", "%d", fi.Generation)
	p("Access", "%s", ts(fi.Atime))
	p("Modify", "%s", ts(fi.Mtime))
	p("Change", "%s", ts(fi.Ctime))
	if !fi.Crtime.IsZero() {
		p("Birth", "%s", ts(fi.Crtime))
	}
	if fi.Mode()&iofs.ModeSymlink != 0 {
		if t, err := v.Readlink(args[1]); err == nil {
			p("Target", "%s", t)
		}
	}
	return tw.Flush()
}

func cmdFiemap(args []string, w io.Writer) error {
	args, err := noFlags("fiemap", args, 2)
	if err != nil {
		return err
	}
	v, err := openImage(args[0])
	if err != nil {
		return err
	}
	defer v.Close()
	f, err := v.Open(args[1])
	if err != nil {
		return err
	}
	exts, err := f.Extents()
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "File size of %s is %d (%d blocks of %d bytes)\n", args[1], f.Size(),
		(f.Size()+int64(v.BlockSize())-1)/int64(v.BlockSize()), v.BlockSize())
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, " ext:\t logical_offset:\t\t physical_offset:\t\t length:\t flags:\t")
	for i, e := range exts {
		var flags []string
		if e.Unwritten {
			flags = append(flags, "unwritten")
		}
		if i == len(exts)-1 {
			flags = append(flags, "last")
		}
		fmt.Fprintf(tw, "%d:\t %d..\t %d:\t %d..\t %d:\t %d:\t %s\t\n", i, e.Logical, e.Logical+e.Length-1,
			e.Physical, e.Physical+e.Length-1, e.Length, strings.Join(flags, ","))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "%s: %d extents found\n", args[1], len(exts))
	return nil
}

// maybeImage reports whether path is a regular file or a device, which
// can be opened without blocking (a named pipe would wait for a writer).
func maybeImage(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && (fi.Mode().IsRegular() || fi.Mode()&os.ModeDevice != 0)
}
