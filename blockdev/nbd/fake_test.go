package nbd_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/blockdevtest"
	"github.com/ext4io/ext4io/blockdev/nbd"
)

// fake is a small in-process NBD server for protocol edge cases that real
// servers do not produce on demand. It speaks fixed newstyle with
// NBD_OPT_GO (or only NBD_OPT_EXPORT_NAME) and simple replies, and records
// every request it receives.
type fake struct {
	t        *testing.T
	ln       net.Listener
	sock     string
	export   string
	size     uint64
	flags    uint16        // transmission flags
	block    [3]uint32     // min, preferred, max; zero: not sent
	noGo     bool          // answer NBD_OPT_GO with NBD_REP_ERR_UNSUP
	oldstyle bool          // send the oldstyle greeting
	reverse  int           // hold this many replies, then send them in reverse
	corrupt  string        // "magic" or "handle": break the first reply
	slowSync time.Duration // how long a flush takes

	mu    sync.Mutex
	data  []byte
	reqs  []fakeReq
	conns int
	wg    sync.WaitGroup
}

type fakeReq struct {
	conn        int
	typ, flags  uint16
	off, length uint64
}

const (
	nbdCmdRead, nbdCmdWrite, nbdCmdDisc, nbdCmdFlush, nbdCmdTrim, nbdCmdWriteZeroes = 0, 1, 2, 3, 4, 6
)

func (f *fake) start() {
	f.t.Helper()
	f.data = make([]byte, f.size)
	f.sock = filepath.Join(sockDir(f.t), "s")
	ln, err := net.Listen("unix", f.sock)
	if err != nil {
		f.t.Fatal(err)
	}
	f.ln = ln
	f.t.Cleanup(func() { ln.Close(); f.wg.Wait() })
	f.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			f.mu.Lock()
			id := f.conns
			f.conns++
			f.mu.Unlock()
			f.wg.Go(func() { defer c.Close(); f.serve(c, id) })
		}
	})
}

func (f *fake) uri(export string) string { return "nbd+unix:///" + export + "?socket=" + f.sock }

func (f *fake) requests() []fakeReq {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fakeReq(nil), f.reqs...)
}

func (f *fake) serve(c net.Conn, id int) {
	be := binary.BigEndian
	c.SetDeadline(time.Now().Add(20 * time.Second))
	if f.oldstyle {
		b := be.AppendUint64(nil, 0x4e42444d41474943)
		b = be.AppendUint64(b, 0x00420281861253)
		c.Write(b)
		return
	}
	b := be.AppendUint64(nil, 0x4e42444d41474943)
	b = be.AppendUint64(b, 0x49484156454f5054)
	b = be.AppendUint16(b, 1|2) // fixed newstyle, no zeroes
	c.Write(b)
	var cf [4]byte
	if _, err := io.ReadFull(c, cf[:]); err != nil {
		return
	}
	noZeroes := be.Uint32(cf[:])&2 != 0
	reply := func(opt, typ uint32, data []byte) {
		r := be.AppendUint64(nil, 0x3e889045565a9)
		r = be.AppendUint32(r, opt)
		r = be.AppendUint32(r, typ)
		r = be.AppendUint32(r, uint32(len(data)))
		c.Write(append(r, data...))
	}
	for {
		var h [16]byte
		if _, err := io.ReadFull(c, h[:]); err != nil {
			return
		}
		opt, n := be.Uint32(h[8:]), be.Uint32(h[12:])
		data := make([]byte, n)
		if _, err := io.ReadFull(c, data); err != nil {
			return
		}
		if opt == 1 { // NBD_OPT_EXPORT_NAME
			r := be.AppendUint64(nil, f.size)
			r = be.AppendUint16(r, f.flags)
			if !noZeroes {
				r = append(r, make([]byte, 124)...)
			}
			c.Write(r)
			break
		}
		if opt != 7 || f.noGo {
			reply(opt, 1<<31|1, nil) // NBD_REP_ERR_UNSUP
			continue
		}
		name := string(data[4 : 4+be.Uint32(data)])
		if name != f.export {
			reply(opt, 1<<31|6, []byte("no such export")) // NBD_REP_ERR_UNKNOWN
			continue
		}
		info := be.AppendUint16(nil, 0) // NBD_INFO_EXPORT
		info = be.AppendUint64(info, f.size)
		reply(opt, 3, be.AppendUint16(info, f.flags))
		if f.block[0] != 0 {
			info = be.AppendUint16(nil, 3) // NBD_INFO_BLOCK_SIZE
			for _, v := range f.block {
				info = be.AppendUint32(info, v)
			}
			reply(opt, 3, info)
		}
		reply(opt, 1, nil) // NBD_REP_ACK
		break
	}
	c.SetDeadline(time.Time{})
	var held [][]byte
	first := true
	for {
		var h [28]byte
		if _, err := io.ReadFull(c, h[:]); err != nil {
			return
		}
		r := fakeReq{conn: id, flags: be.Uint16(h[4:]), typ: be.Uint16(h[6:]), off: be.Uint64(h[16:]), length: uint64(be.Uint32(h[24:]))}
		handle := be.Uint64(h[8:])
		f.mu.Lock()
		f.reqs = append(f.reqs, r)
		f.mu.Unlock()
		var payload []byte
		errno := uint32(0)
		if r.off+r.length > f.size && r.typ != nbdCmdFlush {
			errno = 22
		}
		switch r.typ {
		case nbdCmdDisc:
			return
		case nbdCmdFlush:
			time.Sleep(f.slowSync)
		case nbdCmdWrite:
			p := make([]byte, r.length)
			if _, err := io.ReadFull(c, p); err != nil {
				return
			}
			if errno == 0 {
				f.mu.Lock()
				copy(f.data[r.off:], p)
				f.mu.Unlock()
			}
		case nbdCmdRead:
			if errno == 0 {
				f.mu.Lock()
				payload = bytes.Clone(f.data[r.off : r.off+r.length])
				f.mu.Unlock()
			}
		case nbdCmdTrim, nbdCmdWriteZeroes:
			if errno == 0 {
				f.mu.Lock()
				clear(f.data[r.off : r.off+r.length])
				f.mu.Unlock()
			}
		}
		if first && f.corrupt == "handle" {
			handle ^= 0xdead
		}
		rep := be.AppendUint32(nil, 0x67446698)
		if first && f.corrupt == "magic" {
			rep = be.AppendUint32(nil, 0x668e33ef)
		}
		first = false
		rep = be.AppendUint32(rep, errno)
		rep = be.AppendUint64(rep, handle)
		rep = append(rep, payload...)
		if f.reverse == 0 {
			c.Write(rep)
			continue
		}
		held = append(held, rep)
		if len(held) == f.reverse {
			for i := len(held) - 1; i >= 0; i-- {
				c.Write(held[i])
			}
			held = held[:0]
		}
	}
}

const (
	fHasFlags   = 1 << 0
	fReadOnly   = 1 << 1
	fFlush      = 1 << 2
	fFUA        = 1 << 3
	fTrim       = 1 << 5
	fZeroes     = 1 << 6
	fMultiConn  = 1 << 8
	fAllDefault = fHasFlags | fFlush | fTrim | fZeroes
)

// TestOutOfOrderReplies: the server answers 16 requests in flight on one
// connection in reverse order; each caller gets its own data.
func TestOutOfOrderReplies(t *testing.T) {
	f := &fake{t: t, size: 1 << 20, flags: fAllDefault, reverse: 16}
	f.start()
	d, err := nbd.Open(f.uri(""), nbd.Options{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for i := range 16 {
		f.mu.Lock()
		copy(f.data[i*4096:], blockdevtest.Pattern(uint64(i), int64(i*4096), 4096))
		f.mu.Unlock()
	}
	var wg sync.WaitGroup
	errc := make(chan error, 16)
	for i := range 16 {
		wg.Go(func() {
			p := make([]byte, 4096)
			if _, err := d.ReadAt(p, int64(i*4096)); err != nil {
				errc <- err
				return
			}
			if !bytes.Equal(p, blockdevtest.Pattern(uint64(i), int64(i*4096), 4096)) {
				errc <- fmt.Errorf("read %d got another request's data", i)
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
}

// TestBlockSizeConstraints: a 4 KiB minimum and a 64 KiB maximum shape
// every request (N1, N2); the size is rounded down to the minimum.
func TestBlockSizeConstraints(t *testing.T) {
	f := &fake{t: t, size: 1<<20 + 100, flags: fAllDefault, block: [3]uint32{4096, 4096, 64 << 10}}
	f.start()
	d, err := nbd.Open(f.uri(""), nbd.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if d.Size() != 1<<20 || d.LogicalBlockSize() != 4096 {
		t.Errorf("Size, LogicalBlockSize = %d, %d; want %d, 4096", d.Size(), d.LogicalBlockSize(), 1<<20)
	}
	p := blockdevtest.Pattern(1, 100, 300_000)
	if _, err := d.WriteAt(p, 100); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(p))
	if _, err := d.ReadAt(got, 100); err != nil || !bytes.Equal(got, p) {
		t.Fatalf("read back: %v, equal %v", err, bytes.Equal(got, p))
	}
	if err := d.ZeroOut(5000, 200_000); err != nil {
		t.Fatal(err)
	}
	if err := d.Discard(1, 300_000); err != nil {
		t.Fatal(err)
	}
	d.Close()
	for _, r := range f.requests() {
		if r.off%4096 != 0 || r.length%4096 != 0 {
			t.Errorf("request %+v not aligned to the 4096-byte minimum", r)
		}
		if r.typ != nbdCmdTrim && r.length > 64<<10 {
			t.Errorf("request %+v longer than the 64 KiB maximum", r)
		}
		if r.typ == nbdCmdWriteZeroes && r.flags != 0 {
			t.Errorf("WRITE_ZEROES with flags %#x: ZeroOut needs no NO_HOLE", r.flags)
		}
	}
}

// TestMultiConnFlushAndDisc: with NBD_FLAG_CAN_MULTI_CONN, requests are
// spread over the connections, Flush reaches every one, and Close sends
// NBD_CMD_DISC on every one.
func TestMultiConnFlushAndDisc(t *testing.T) {
	f := &fake{t: t, size: 1 << 20, flags: fAllDefault | fMultiConn}
	f.start()
	d, err := nbd.Open(f.uri(""), nbd.Options{Conns: 3})
	if err != nil {
		t.Fatal(err)
	}
	if d.Conns() != 3 {
		t.Fatalf("Conns() = %d, want 3", d.Conns())
	}
	for i := range 9 {
		if _, err := d.WriteAt(make([]byte, 512), int64(i)*512); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	// The server goroutines record DISC after Close returns: wait for them.
	var reqs []fakeReq
	for start := time.Now(); time.Since(start) < 5*time.Second; time.Sleep(5 * time.Millisecond) {
		reqs = f.requests()
		n := 0
		for _, r := range reqs {
			if r.typ == nbdCmdDisc {
				n++
			}
		}
		if n == 3 {
			break
		}
	}
	writes, flushes, discs := map[int]int{}, map[int]int{}, map[int]int{}
	for _, r := range reqs {
		switch r.typ {
		case nbdCmdWrite:
			writes[r.conn]++
		case nbdCmdFlush:
			flushes[r.conn]++
		case nbdCmdDisc:
			discs[r.conn]++
		}
	}
	for c := range 3 {
		if writes[c] == 0 || flushes[c] != 1 || discs[c] != 1 {
			t.Errorf("connection %d: %d writes, %d flushes, %d disconnects; want >0, 1, 1", c, writes[c], flushes[c], discs[c])
		}
	}
}

// TestHandshakeVariants: fallback to NBD_OPT_EXPORT_NAME, refusal of
// oldstyle servers and unknown exports, and no flush on a server without
// NBD_FLAG_SEND_FLUSH.
func TestHandshakeVariants(t *testing.T) {
	f := &fake{t: t, size: 1 << 20, flags: fHasFlags, noGo: true, export: "x"}
	f.start()
	d, err := nbd.Open(f.uri("x"), nbd.Options{})
	if err != nil {
		t.Fatalf("EXPORT_NAME fallback: %v", err)
	}
	if d.Size() != 1<<20 {
		t.Errorf("Size = %d", d.Size())
	}
	if err := d.Flush(); err != nil {
		t.Errorf("Flush without SEND_FLUSH: %v", err)
	}
	if err := d.Discard(0, 4096); err != nil {
		t.Errorf("Discard without SEND_TRIM: %v", err)
	}
	if err := d.ZeroOut(0, 4096); err != nil {
		t.Errorf("ZeroOut without SEND_WRITE_ZEROES: %v", err)
	}
	d.Close()
	for _, r := range f.requests() {
		if r.typ == nbdCmdFlush || r.typ == nbdCmdTrim || r.typ == nbdCmdWriteZeroes {
			t.Errorf("command %d sent though not advertised", r.typ)
		}
	}

	old := &fake{t: t, size: 1 << 20, oldstyle: true}
	old.start()
	if _, err := nbd.Open(old.uri(""), nbd.Options{}); !errors.Is(err, blockdev.ErrUnsupported) {
		t.Errorf("oldstyle server: %v, want ErrUnsupported", err)
	}

	ro := &fake{t: t, size: 1 << 20, flags: fHasFlags | fReadOnly, export: "e"}
	ro.start()
	if _, err := nbd.Open(ro.uri("other"), nbd.Options{}); err == nil {
		t.Error("Open of an unknown export succeeded")
	}
	d, err = nbd.Open(ro.uri("e"), nbd.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !d.ReadOnly() {
		t.Error("NBD_FLAG_READ_ONLY not reported")
	}
	d.Close()
}

// TestBrokenReplies: a reply with a structured-reply magic that was not
// negotiated, or for a handle never sent, fails the connection with ErrIO
// at once, without waiting for the timeout.
func TestBrokenReplies(t *testing.T) {
	for _, mode := range []string{"magic", "handle"} {
		t.Run(mode, func(t *testing.T) {
			f := &fake{t: t, size: 1 << 20, flags: fAllDefault, corrupt: mode}
			f.start()
			d, err := nbd.Open(f.uri(""), nbd.Options{Timeout: 10 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			err = within(t, 2*time.Second, "read", readErr(d, 0))
			if !errors.Is(err, blockdev.ErrIO) {
				t.Errorf("read with a broken reply = %v, want ErrIO", err)
			}
		})
	}
}

// TestWriteAtFUA: with NBD_FLAG_SEND_FUA every write of WriteAtFUA and of
// WriteAtSync, through blockdev.WriteAtSync as ext4io calls it (the
// read-modify-writes of its partial blocks included), carries
// NBD_CMD_FLAG_FUA and no flush follows; without it, plain writes and a
// flush.
func TestWriteAtFUA(t *testing.T) {
	for _, tc := range []struct {
		name  string
		write func(d *nbd.Device, p []byte, off int64) (int, error)
	}{
		{"WriteAtFUA", (*nbd.Device).WriteAtFUA},
		{"blockdev.WriteAtSync", func(d *nbd.Device, p []byte, off int64) (int, error) { return blockdev.WriteAtSync(d, p, off) }},
	} {
		for _, fua := range []bool{true, false} {
			t.Run(fmt.Sprint(tc.name, "/fua=", fua), func(t *testing.T) { testWriteAtFUA(t, tc.write, fua) })
		}
	}
}

func testWriteAtFUA(t *testing.T, write func(d *nbd.Device, p []byte, off int64) (int, error), fua bool) {
	flags := uint16(fAllDefault)
	if fua {
		flags |= fFUA
	}
	f := &fake{t: t, size: 1 << 20, flags: flags, block: [3]uint32{512, 4096, 1 << 20}}
	f.start()
	d, err := nbd.Open(f.uri(""), nbd.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p := blockdevtest.Pattern(3, 100, 10000)
	if n, err := write(d, p, 100); err != nil || n != len(p) {
		t.Fatalf("write = %d, %v", n, err)
	}
	got := make([]byte, len(p))
	if _, err := d.ReadAt(got, 100); err != nil || !bytes.Equal(got, p) {
		t.Fatalf("read back: %v", err)
	}
	d.Close()
	writes, flushes := 0, 0
	for _, r := range f.requests() {
		switch r.typ {
		case nbdCmdWrite:
			writes++
			if (r.flags&1 != 0) != fua {
				t.Errorf("write %+v: FUA flag %v, want %v", r, r.flags&1 != 0, fua)
			}
		case nbdCmdFlush:
			flushes++
		}
	}
	if writes != 3 { // head and tail read-modify-writes, the middle
		t.Errorf("%d writes, want 3", writes)
	}
	if wantFlush := map[bool]int{true: 0, false: 1}[fua]; flushes != wantFlush {
		t.Errorf("%d flushes, want %d", flushes, wantFlush)
	}
}

// TestFlushTimeout: a flush may take longer than Options.Timeout (a server
// writing back a large cache) as long as it stays within FlushTimeout.
func TestFlushTimeout(t *testing.T) {
	for _, tc := range []struct {
		flushTimeout time.Duration
		ok           bool
	}{{3 * time.Second, true}, {300 * time.Millisecond, false}} {
		t.Run(fmt.Sprint(tc.flushTimeout), func(t *testing.T) {
			f := &fake{t: t, size: 1 << 20, flags: fAllDefault, slowSync: time.Second}
			f.start()
			d, err := nbd.Open(f.uri(""), nbd.Options{Timeout: 200 * time.Millisecond, FlushTimeout: tc.flushTimeout})
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			err = within(t, 5*time.Second, "slow flush", d.Flush)
			if tc.ok && err != nil {
				t.Errorf("1 s flush with FlushTimeout %v: %v", tc.flushTimeout, err)
			}
			if !tc.ok && !errors.Is(err, blockdev.ErrIO) {
				t.Errorf("1 s flush with FlushTimeout %v = %v, want ErrIO", tc.flushTimeout, err)
			}
		})
	}
}
