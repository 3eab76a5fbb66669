package ext4io_test

import (
	"errors"
	"fmt"
	"io/fs"
	"log"
	"os"
	"path/filepath"
	"syscall"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/iomap"
)

// Format makes an empty ext4 filesystem, here on a sparse in-memory
// device. The zero FormatOptions give mkfs.ext4's defaults.
func ExampleFormat() {
	dev := memdev.New(64 << 20)
	defer dev.Close()
	if err := ext4io.Format(dev, ext4io.FormatOptions{Label: "scratch"}); err != nil {
		log.Fatal(err)
	}
	v, err := ext4io.Open(dev, ext4io.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer v.Close()
	sb := v.Superblock()
	fmt.Println("label:", sb.Label())
	fmt.Println("block size:", v.BlockSize())
	fmt.Println("blocks:", sb.BlocksCount)
	fmt.Println("metadata_csum:", sb.MetadataCsum())
	// Output:
	// label: scratch
	// block size: 4096
	// blocks: 16384
	// metadata_csum: true
}

// Open takes any blockdev.Device; the caller keeps ownership of it. A
// read-only open (the zero Options) writes nothing.
func ExampleOpen() {
	dev := memdev.New(64 << 20)
	defer dev.Close()
	if err := ext4io.Format(dev, ext4io.FormatOptions{BlockSize: 1024}); err != nil {
		log.Fatal(err)
	}
	v, err := ext4io.Open(dev, ext4io.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer v.Close()
	fmt.Println("writable:", v.Writable())
	fmt.Println("block size:", v.BlockSize())
	if _, err := v.Create("x"); errors.Is(err, ext4io.ErrReadOnly) {
		fmt.Println("create on a read-only volume: ErrReadOnly")
	}
	// Output:
	// writable: false
	// block size: 1024
	// create on a read-only volume: ErrReadOnly
}

// OpenImage opens an image file with the file backend; Close closes the
// file too.
func ExampleOpenImage() {
	dir, err := os.MkdirTemp("", "ext4io-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "disk.img")

	dev, err := blockdev.CreateFile(path, 64<<20) // sparse on the host
	if err != nil {
		log.Fatal(err)
	}
	if err := ext4io.Format(dev, ext4io.FormatOptions{}); err != nil {
		log.Fatal(err)
	}
	if err := dev.Close(); err != nil {
		log.Fatal(err)
	}

	v, err := ext4io.OpenImage(path, ext4io.Options{Writable: true})
	if err != nil {
		log.Fatal(err)
	}
	f, err := v.Create("note.txt")
	if err != nil {
		log.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("kept on disk\n"), 0); err != nil {
		log.Fatal(err)
	}
	f.Close()
	if err := v.Close(); err != nil { // marks the image clean
		log.Fatal(err)
	}

	v, err = ext4io.OpenImage(path, ext4io.Options{}) // read-only
	if err != nil {
		log.Fatal(err)
	}
	defer v.Close()
	data, err := fs.ReadFile(v.FS(), "note.txt")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s", data)
	// Output:
	// kept on disk
}

// Create makes a new file. WriteAt and ReadAt work like os.File's; Sync
// makes the data and metadata durable.
func ExampleVolume_Create() {
	dev := memdev.New(64 << 20)
	if err := ext4io.Format(dev, ext4io.FormatOptions{}); err != nil {
		log.Fatal(err)
	}
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true})
	if err != nil {
		log.Fatal(err)
	}
	defer v.Close()

	f, err := v.Create("hello.txt")
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte("hello, ext4\n"), 0); err != nil {
		log.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		log.Fatal(err)
	}
	buf := make([]byte, 32)
	n, err := f.ReadAt(buf, 0) // a read past EOF returns io.EOF
	fmt.Printf("%d bytes %q, err=%v\n", n, buf[:n], err)
	fmt.Println("size:", f.Size())
	// Output:
	// 12 bytes "hello, ext4\n", err=EOF
	// size: 12
}

// Mkdir makes a directory; ReadDir lists it in on-disk order, without
// "." and "..".
func ExampleVolume_Mkdir() {
	dev := memdev.New(64 << 20)
	if err := ext4io.Format(dev, ext4io.FormatOptions{}); err != nil {
		log.Fatal(err)
	}
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true})
	if err != nil {
		log.Fatal(err)
	}
	defer v.Close()

	if err := v.Mkdir("logs", 0o755); err != nil {
		log.Fatal(err)
	}
	for _, name := range []string{"logs/a.log", "logs/b.log"} {
		f, err := v.Create(name)
		if err != nil {
			log.Fatal(err)
		}
		f.Close()
	}
	if err := v.Mkdir("logs/old", 0o700); err != nil {
		log.Fatal(err)
	}
	entries, err := v.ReadDir("logs")
	if err != nil {
		log.Fatal(err)
	}
	for _, e := range entries {
		fmt.Println(e.Name(), e.IsDir())
	}
	fi, err := v.Stat("logs/old")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(fi.Mode())
	// Output:
	// a.log false
	// b.log false
	// old true
	// drwx------
}

// Rename moves a name, replacing a file at the target; Unlink removes a
// name, and the inode with its last name.
func ExampleVolume_Rename() {
	dev := memdev.New(64 << 20)
	if err := ext4io.Format(dev, ext4io.FormatOptions{}); err != nil {
		log.Fatal(err)
	}
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true})
	if err != nil {
		log.Fatal(err)
	}
	defer v.Close()

	if err := v.Mkdir("dir", 0o755); err != nil {
		log.Fatal(err)
	}
	f, err := v.Create("draft")
	if err != nil {
		log.Fatal(err)
	}
	f.Close()
	// The write-to-temp-then-rename pattern.
	if err := v.Rename("draft", "dir/final"); err != nil {
		log.Fatal(err)
	}
	_, err = v.Stat("draft")
	fmt.Println("draft exists:", !errors.Is(err, fs.ErrNotExist))
	_, err = v.Stat("dir/final")
	fmt.Println("dir/final exists:", err == nil)

	if err := v.Unlink("dir/final"); err != nil {
		log.Fatal(err)
	}
	_, err = v.Stat("dir/final")
	fmt.Println("after Unlink:", errors.Is(err, ext4io.ErrNotFound))
	// Output:
	// draft exists: false
	// dir/final exists: true
	// after Unlink: true
}

// Fallocate preallocates space. The blocks are unwritten: they read as
// zeroes until written, and Extents reports them so.
func ExampleFile_Fallocate() {
	dev := memdev.New(64 << 20)
	if err := ext4io.Format(dev, ext4io.FormatOptions{}); err != nil {
		log.Fatal(err)
	}
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true})
	if err != nil {
		log.Fatal(err)
	}
	defer v.Close()
	f, err := v.Create("prealloc")
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()

	if err := f.Fallocate(ext4io.FallocAllocate, 0, 1<<20); err != nil { // 256 blocks
		log.Fatal(err)
	}
	if _, err := f.WriteAt(make([]byte, 4096), 64*4096); err != nil { // block 64
		log.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		log.Fatal(err)
	}
	fmt.Println("size:", f.Size())
	exts, err := f.Extents()
	if err != nil {
		log.Fatal(err)
	}
	for _, e := range exts {
		fmt.Printf("logical %d, %d blocks, unwritten %v\n", e.Logical, e.Length, e.Unwritten)
	}
	// Output:
	// size: 1048576
	// logical 0, 64 blocks, unwritten true
	// logical 64, 1 blocks, unwritten false
	// logical 65, 191 blocks, unwritten true
}

// Truncate shrinks a file, freeing the blocks past the new end, or grows
// it with a hole.
func ExampleFile_Truncate() {
	dev := memdev.New(64 << 20)
	if err := ext4io.Format(dev, ext4io.FormatOptions{}); err != nil {
		log.Fatal(err)
	}
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true})
	if err != nil {
		log.Fatal(err)
	}
	defer v.Close()
	f, err := v.Create("t")
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte("0123456789"), 0); err != nil {
		log.Fatal(err)
	}
	if err := f.Truncate(4); err != nil {
		log.Fatal(err)
	}
	if err := f.Truncate(8); err != nil { // grows with zeroes
		log.Fatal(err)
	}
	buf := make([]byte, f.Size())
	if _, err := f.ReadAt(buf, 0); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%q\n", buf)
	// Output:
	// "0123\x00\x00\x00\x00"
}

// FS is an io/fs view of a volume, for fs.WalkDir, fs.ReadFile, http.FS
// or testing/fstest.
func ExampleVolume_FS() {
	dev := memdev.New(64 << 20)
	if err := ext4io.Format(dev, ext4io.FormatOptions{}); err != nil {
		log.Fatal(err)
	}
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true})
	if err != nil {
		log.Fatal(err)
	}
	defer v.Close()
	if err := v.Mkdir("etc", 0o755); err != nil {
		log.Fatal(err)
	}
	f, err := v.Create("etc/hostname")
	if err != nil {
		log.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("box\n"), 0); err != nil {
		log.Fatal(err)
	}
	f.Close()
	if err := v.Symlink("etc/hostname", "name"); err != nil {
		log.Fatal(err)
	}

	fsys := v.FS()
	err = fs.WalkDir(fsys, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fmt.Println(path, d.Type())
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	data, err := fs.ReadFile(fsys, "name") // follows the symlink
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("name: %q\n", data)
	// Output:
	// . d---------
	// etc d---------
	// etc/hostname ----------
	// lost+found d---------
	// name L---------
	// name: "box\n"
}

// A file opened with O_DIRECT moves data between the caller's buffer and the
// device without the page cache. Offsets and lengths must be multiples of
// the device's logical block size.
func ExampleVolume_OpenFile() {
	dev := memdev.New(64 << 20)
	if err := ext4io.Format(dev, ext4io.FormatOptions{}); err != nil {
		log.Fatal(err)
	}
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true})
	if err != nil {
		log.Fatal(err)
	}
	defer v.Close()
	f, err := v.Create("data")
	if err != nil {
		log.Fatal(err)
	}
	f.Close()

	d, err := v.OpenFile("data", os.O_RDWR|ext4io.O_DIRECT, 0)
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close()
	block := make([]byte, 4096)
	copy(block, "direct")
	if _, err := d.WriteAt(block, 8192); err != nil {
		log.Fatal(err)
	}
	if err := d.Datasync(); err != nil {
		log.Fatal(err)
	}
	_, err = d.WriteAt(block[:100], 0)
	fmt.Println("misaligned write:", errors.Is(err, ext4io.ErrInvalid))

	got := make([]byte, 4096)
	if _, err := d.ReadAt(got, 8192); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%q, size %d\n", got[:6], d.Size())
	// Output:
	// misaligned write: true
	// "direct", size 12288
}

// Errors wrap the package sentinels; ErrNotFound and ErrExist also match
// io/fs's ErrNotExist and ErrExist.
func Example_errors() {
	dev := memdev.New(64 << 20)
	if err := ext4io.Format(dev, ext4io.FormatOptions{}); err != nil {
		log.Fatal(err)
	}
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true})
	if err != nil {
		log.Fatal(err)
	}
	defer v.Close()

	_, err = v.Open("missing.txt")
	fmt.Println(errors.Is(err, ext4io.ErrNotFound), errors.Is(err, fs.ErrNotExist))

	if err := v.Mkdir("d", 0o755); err != nil {
		log.Fatal(err)
	}
	err = v.Mkdir("d", 0o755)
	fmt.Println(errors.Is(err, ext4io.ErrExist), errors.Is(err, fs.ErrExist))

	err = v.Unlink("d") // a directory: use Rmdir
	fmt.Println(errors.Is(err, ext4io.ErrIsDir), errors.Is(err, syscall.EISDIR))

	v.Close()
	_, err = v.Open("d")
	fmt.Println(errors.Is(err, ext4io.ErrClosed))
	// Output:
	// true true
	// true true
	// true true
	// true
}

// Corrupt metadata is reported as a *CorruptError that says what is
// wrong and where, and wraps ErrCorrupt. Here a flipped byte in the root
// directory's inode fails its checksum.
func ExampleCorruptError() {
	dev := memdev.New(64 << 20)
	if err := ext4io.Format(dev, ext4io.FormatOptions{}); err != nil {
		log.Fatal(err)
	}
	v, err := ext4io.Open(dev, ext4io.Options{})
	if err != nil {
		log.Fatal(err)
	}
	// Find the root inode (2) on disk: the first group's inode table,
	// second slot.
	g, err := v.Group(0)
	if err != nil {
		log.Fatal(err)
	}
	sb := v.Superblock()
	v.Close()
	off := int64(g.InodeTable)*int64(sb.BlockSize()) + int64(sb.InodeSize) + 0x10 // i_mtime
	// Flip the byte (writing a fixed value would change nothing when the
	// clock's low byte already holds it).
	b := make([]byte, 1)
	if _, err := dev.ReadAt(b, off); err != nil {
		log.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := dev.WriteAt(b, off); err != nil {
		log.Fatal(err)
	}

	_, err = ext4io.Open(dev, ext4io.Options{}) // Open reads the root inode
	var ce *ext4io.CorruptError
	if errors.As(err, &ce) {
		fmt.Printf("corrupt %s, inode %d, byte %#x of its block\n", ce.What, ce.Ino, ce.Off)
	}
	fmt.Println(errors.Is(err, ext4io.ErrCorrupt))
	// Output:
	// corrupt inode, inode 2, byte 0x100 of its block
	// true
}

// Fiemap reports a file's mappings as Linux's FIEMAP ioctl does, with
// byte offsets and flags; SeekData and SeekHole find the data around the
// holes.
func ExampleFile_Fiemap() {
	dev := memdev.New(64 << 20)
	if err := ext4io.Format(dev, ext4io.FormatOptions{}); err != nil {
		log.Fatal(err)
	}
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true})
	if err != nil {
		log.Fatal(err)
	}
	defer v.Close()
	f, err := v.Create("sparse")
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(make([]byte, 8192), 1<<20); err != nil {
		log.Fatal(err)
	}
	if err := f.Fallocate(ext4io.FallocKeepSize, 2<<20, 4096); err != nil {
		log.Fatal(err)
	}
	if err := f.Sync(); err != nil { // write-back allocates the buffered write
		log.Fatal(err)
	}
	err = f.Fiemap(0, 4<<20, func(e iomap.Extent) error {
		fmt.Printf("logical %d, length %d, flags %#x\n", e.Logical, e.Length, e.Flags)
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	data, err := f.SeekData(0)
	if err != nil {
		log.Fatal(err)
	}
	hole, err := f.SeekHole(data)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("data", data, "hole", hole)
	// Output:
	// logical 1048576, length 8192, flags 0x0
	// logical 2097152, length 4096, flags 0x801
	// data 1048576 hole 1056768
}

// A crash after Sync loses nothing: Open replays the journal. Crashable
// keeps what a power cut would leave on the device.
func Example_crashRecovery() {
	c, err := errordev.NewCrashable(memdev.New(64 << 20))
	if err != nil {
		log.Fatal(err)
	}
	if err := ext4io.Format(c, ext4io.FormatOptions{}); err != nil {
		log.Fatal(err)
	}
	v, err := ext4io.Open(c, ext4io.Options{Writable: true, CommitInterval: -1})
	if err != nil {
		log.Fatal(err)
	}
	f, err := v.Create("wal")
	if err != nil {
		log.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("synced record\n"), 0); err != nil {
		log.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		log.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("never synced\n"), 14); err != nil {
		log.Fatal(err)
	}

	// Power cut: only what was flushed survives.
	img, err := c.Crash(errordev.CrashOptions{})
	if err != nil {
		log.Fatal(err)
	}
	f.Close()
	v.Close()

	v, err = ext4io.Open(img, ext4io.Options{Writable: true})
	if err != nil {
		log.Fatal(err)
	}
	defer v.Close()
	fmt.Println("journal replayed:", v.Recovery() != nil)
	data, err := fs.ReadFile(v.FS(), "wal")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%q\n", data)
	// Output:
	// journal replayed: true
	// "synced record\n"
}
