package main

import (
	"fmt"
	"io"
	"io/fs"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/layout"
)

func openImage(path string) (*ext4io.Volume, error) {
	return ext4io.OpenImage(path, ext4io.Options{})
}

func cmdInfo(args []string, w io.Writer) error {
	if len(args) != 1 {
		return errUsage
	}
	v, err := openImage(args[0])
	if err != nil {
		return err
	}
	defer v.Close()
	sb := v.Superblock()
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	p := func(k string, f string, a ...any) { fmt.Fprintf(tw, "%s:\t"+f+"\n", append([]any{k}, a...)...) }
	p("Volume name", "%s", sb.Label())
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
	if len(args) < 1 || len(args) > 2 {
		return errUsage
	}
	path := "/"
	if len(args) == 2 {
		path = args[1]
	}
	v, err := openImage(args[0])
	if err != nil {
		return err
	}
	defer v.Close()
	fi, err := v.Stat(path)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.AlignRight)
	line := func(name string, fi *ext4io.FileInfo) {
		fmt.Fprintf(tw, "%d\t %s\t %d\t %d\t %d\t %s\t %s\t\n", fi.Ino, fi.Mode(), fi.Nlink, fi.UID, fi.Size(),
			fi.ModTime().UTC().Format("2006-01-02 15:04"), name)
	}
	if !fi.IsDir() {
		line(path, fi)
		return tw.Flush()
	}
	ents, err := v.ReadDir(path)
	if err != nil {
		return err
	}
	for _, e := range ents {
		efi, err := v.Lstat(strings.TrimSuffix(path, "/") + "/" + e.Name())
		if err != nil {
			return err
		}
		line(e.Name(), efi)
	}
	return tw.Flush()
}

func cmdCat(args []string, w io.Writer) error {
	if len(args) != 2 {
		return errUsage
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
	if len(args) != 2 {
		return errUsage
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
	if fi.Mode()&fs.ModeSymlink != 0 {
		if t, err := v.Readlink(args[1]); err == nil {
			p("Target", "%s", t)
		}
	}
	return tw.Flush()
}

func cmdFiemap(args []string, w io.Writer) error {
	if len(args) != 2 {
		return errUsage
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
