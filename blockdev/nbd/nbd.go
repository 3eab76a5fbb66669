// Package nbd is a blockdev.Device on an export of a Network Block Device
// server (nbdkit, qemu-nbd, nbd-server, ...): ext4io on network storage.
//
// Open takes an NBD URI (nbd://host[:port]/export or
// nbd+unix:///export?socket=PATH); Connect takes the parsed Address. A
// command that takes an image path or a URI opens the device with
//
//	if nbd.IsURI(arg) {
//		dev, err = nbd.Open(arg, nbd.Options{ReadOnly: !writable})
//	}
//
// The client speaks the fixed-newstyle handshake with NBD_OPT_GO, asking for
// the export size, transmission flags and block-size constraints, then
// simple replies only (structured replies are not negotiated). Integers on
// the wire are big-endian. A request and a simple reply:
//
//	request                               simple reply
//	0x00 u32 magic 0x25609513             0x00 u32 magic 0x67446698
//	0x04 u16 command flags (FUA, NO_HOLE) 0x04 u32 error (0, NBD_EIO, ...)
//	0x06 u16 type (READ, WRITE, ...)      0x08 u64 handle of the request
//	0x08 u64 handle                       0x10 data (a successful READ)
//	0x10 u64 offset
//	0x18 u32 length
//	0x1c data (WRITE only)
//
// # Connections and requests in flight
//
// Each connection has one reader goroutine that matches replies to
// requests by handle, so any number of requests are in flight on one
// connection, answered in any order. Requests are written whole under a
// per-connection mutex (header and payload in one writev). When the server
// advertises NBD_FLAG_CAN_MULTI_CONN, Options.Conns connections are opened
// and operations are spread over them round-robin; Flush flushes every one.
//
// # Timeouts
//
// A connection whose server has not answered a request for Options.Timeout
// (Options.FlushTimeout for a flush), or not accepted its bytes for that
// long, is failed: its requests in flight, and every later one sent to it,
// return errors wrapping blockdev.ErrIO. A dead or stalled server
// therefore costs at most one timeout, never a hang. Connections are not re-established: what a lost
// connection had in flight is unknown, and a file system above must treat
// the device as failed (ext4io turns the volume read-only on ErrIO).
//
// # Invariants
//
//   - N1: every request's offset and length are multiples of the server's
//     minimum block size; unaligned writes read-modify-write the partial
//     blocks at their ends under a per-block lock, so concurrent writes to
//     disjoint bytes of one block do not lose each other.
//   - N2: READ, WRITE and WRITE_ZEROES are never longer than the server's
//     maximum block size (32 MiB when it advertises none); longer calls are
//     split and the pieces sent together.
//   - N3: each call is answered exactly once, by the reader on a reply or
//     by the connection's failure, and the reader never touches a call's
//     buffer after the caller has been answered.
//   - N4: Flush sends NBD_CMD_FLUSH only after every write it must cover
//     has been answered (the Device contract: writes that completed before
//     the call), on every connection, as the protocol asks of multi-conn
//     clients.
package nbd

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/internal/devutil"
)

// Options configure Open and Connect.
type Options struct {
	// Timeout bounds dialing and the handshake, and how long a request may
	// wait for its reply (or for the server to take its bytes). A
	// connection that exceeds it is failed with an error wrapping
	// blockdev.ErrIO. 0 means DefaultTimeout.
	Timeout time.Duration
	// FlushTimeout bounds the wait for a flush's reply, which may have to
	// write back a large server cache to slow storage. 0 means four times
	// Timeout.
	FlushTimeout time.Duration
	// Conns is how many connections to open when the server advertises
	// NBD_FLAG_CAN_MULTI_CONN; other servers get one. 0 means
	// DefaultConns.
	Conns int
	// ReadOnly opens the export read-only even if the server would allow
	// writes.
	ReadOnly bool
}

// Defaults for Options.
const (
	DefaultTimeout = 30 * time.Second
	DefaultConns   = 4
)

// rmwStripes is the number of locks serialising read-modify-writes of
// partial blocks (N1); blocks hash onto them.
const rmwStripes = 64

// Device is a blockdev.Device on an NBD export. It is safe for concurrent
// use.
//
// ZeroOut uses NBD_CMD_WRITE_ZEROES without NBD_CMD_FLAG_NO_HOLE (the
// contract asks only that the range reads as zeroes, so the server may
// punch a hole), or writes zeroes where the server lacks the command.
// Discard sends NBD_CMD_TRIM for the whole minimum-size blocks inside the
// range where the server supports it, and does nothing otherwise: whether
// discarded ranges read as zeroes or as old contents is the server's
// choice. Flush is NBD_CMD_FLUSH; on a server that does not advertise it
// (one that has no write cache to flush) it only checks the device is
// open.
type Device struct {
	label    string // "nbd: " + address, for error messages
	size     int64  // export size, rounded down to minBlock
	minBlock int64  // N1: alignment of every request; a power of two >= 1
	prefBlk  int
	maxReq   int64 // N2: longest READ/WRITE/WRITE_ZEROES, a multiple of minBlock
	flags    uint16
	ro       bool
	conns    []*conn
	// flushTimeout replaces the connection's timeout for NBD_CMD_FLUSH.
	flushTimeout time.Duration
	next         atomic.Uint32 // round-robin cursor over conns

	// closeMu is held shared by every operation for its whole length and
	// exclusively by Close, so Close waits for operations in flight (each
	// bounded by the timeout) before it disconnects.
	closeMu sync.RWMutex
	closed  bool // guarded by closeMu

	rmwMu [rmwStripes]sync.Mutex
}

var (
	_ blockdev.Device     = (*Device)(nil)
	_ blockdev.SyncWriter = (*Device)(nil)
)

// Open connects to the NBD URI uri (see ParseURI) and returns the export as
// a Device.
func Open(uri string, opts Options) (*Device, error) {
	a, err := ParseURI(uri)
	if err != nil {
		return nil, err
	}
	return Connect(a, opts)
}

// Connect connects to the export at a and returns it as a Device. It opens
// one connection, and up to Options.Conns in all if the server advertises
// NBD_FLAG_CAN_MULTI_CONN (fewer if the server refuses more).
func Connect(a Address, opts Options) (*Device, error) {
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.FlushTimeout <= 0 {
		opts.FlushTimeout = 4 * opts.Timeout
	}
	if opts.Conns <= 0 {
		opts.Conns = DefaultConns
	}
	label := "nbd: " + a.String()
	c, ex, err := dial(a.Network, a.Addr, a.Export, opts.Timeout, label)
	if err != nil {
		return nil, err
	}
	d := &Device{label: label, flags: ex.flags, conns: []*conn{c}, flushTimeout: opts.FlushTimeout}
	if err := d.geometry(ex); err != nil {
		c.disconnect()
		return nil, err
	}
	d.ro = opts.ReadOnly || ex.flags&tflagReadOnly != 0
	if ex.flags&tflagCanMultiConn != 0 {
		// Extra connections are an optimisation: a server that turns one
		// away (a client limit) or describes the export differently on it
		// leaves the device with the connections it has.
		for len(d.conns) < opts.Conns {
			c, ex2, err := dial(a.Network, a.Addr, a.Export, opts.Timeout, label)
			if err != nil {
				break
			}
			if ex2 != ex {
				c.disconnect()
				break
			}
			d.conns = append(d.conns, c)
		}
	}
	return d, nil
}

// geometry validates the export's size and block-size constraints.
func (d *Device) geometry(ex export) error {
	d.minBlock = 1
	if ex.minBlock != 0 {
		if ex.minBlock&(ex.minBlock-1) != 0 || ex.minBlock > 64<<10 {
			return fmt.Errorf("%s: minimum block size %d is not a power of two up to 64 KiB: %w", d.label, ex.minBlock, blockdev.ErrIO)
		}
		d.minBlock = int64(ex.minBlock)
	}
	d.prefBlk = 4096
	if ex.prefBlk != 0 {
		d.prefBlk = int(ex.prefBlk)
	}
	d.maxReq = defaultMaxReq
	if ex.maxBlock != 0 && int64(ex.maxBlock) < d.maxReq {
		d.maxReq = int64(ex.maxBlock)
	}
	d.maxReq -= d.maxReq % d.minBlock
	if d.maxReq < d.minBlock {
		return fmt.Errorf("%s: maximum block size %d below minimum %d: %w", d.label, ex.maxBlock, d.minBlock, blockdev.ErrIO)
	}
	if ex.size > math.MaxInt64 {
		return fmt.Errorf("%s: export size %d too large: %w", d.label, ex.size, blockdev.ErrIO)
	}
	// The last partial minimum block cannot be addressed.
	d.size = int64(ex.size) - int64(ex.size)%d.minBlock
	return nil
}

// Size implements blockdev.Device.
func (d *Device) Size() int64 { return d.size }

// LogicalBlockSize implements blockdev.Device: the server's minimum block
// size, but at least 512.
func (d *Device) LogicalBlockSize() int { return int(max(d.minBlock, 512)) }

// PreferredBlockSize returns the server's preferred block size (4096 if it
// advertised none): aligned requests of this size avoid read-modify-write
// in the server.
func (d *Device) PreferredBlockSize() int { return d.prefBlk }

// ReadOnly reports whether the export is read-only (the server said so or
// Options.ReadOnly asked for it). Modifications then fail with
// blockdev.ErrReadOnly.
func (d *Device) ReadOnly() bool { return d.ro }

// Conns returns the number of connections in use.
func (d *Device) Conns() int { return len(d.conns) }

// enter starts an operation: it holds closeMu shared until the returned
// function runs.
func (d *Device) enter() error {
	d.closeMu.RLock()
	if d.closed {
		d.closeMu.RUnlock()
		return devutil.Closed("nbd", d.label[len("nbd: "):])
	}
	return nil
}

func (d *Device) leave() { d.closeMu.RUnlock() }

// enterWrite is enter plus the checks of a modification of [off, off+n).
func (d *Device) enterWrite(what string, off, n int64) error {
	if err := d.enter(); err != nil {
		return err
	}
	if d.ro {
		d.leave()
		return devutil.ReadOnly("nbd", d.label[len("nbd: "):])
	}
	if err := devutil.CheckRange(d.label, what, off, n, d.size); err != nil {
		d.leave()
		return err
	}
	return nil
}

// ReadAt implements io.ReaderAt.
func (d *Device) ReadAt(p []byte, off int64) (int, error) {
	if err := d.enter(); err != nil {
		return 0, err
	}
	defer d.leave()
	n, tail := devutil.ClipRead(d.label, off, len(p), d.size)
	if n == 0 {
		return 0, tail
	}
	if err := d.read(p[:n], off); err != nil {
		return 0, err
	}
	return n, tail
}

// read reads p at off, inside the device.
func (d *Device) read(p []byte, off int64) error {
	end := off + int64(len(p))
	lo, hi := d.alignDown(off), d.alignUp(end)
	if lo == off && hi == end {
		return d.do(cmdRead, 0, off, int64(len(p)), nil, p)
	}
	buf := make([]byte, hi-lo)
	if err := d.do(cmdRead, 0, lo, hi-lo, nil, buf); err != nil {
		return err
	}
	copy(p, buf[off-lo:])
	return nil
}

// WriteAt implements io.WriterAt.
func (d *Device) WriteAt(p []byte, off int64) (int, error) {
	if err := d.enterWrite("write", off, int64(len(p))); err != nil {
		return 0, err
	}
	defer d.leave()
	if err := d.write(p, off, 0); err != nil {
		return 0, err
	}
	return len(p), nil
}

// WriteAtSync implements blockdev.SyncWriter with WriteAtFUA, so that
// blockdev.WriteAtSync (the journal's commit blocks, for one) sends one
// FUA write where the server supports it instead of a write and a flush.
func (d *Device) WriteAtSync(p []byte, off int64) (int, error) { return d.WriteAtFUA(p, off) }

// WriteAtFUA is WriteAt whose data is on stable storage when it returns nil
// (forced unit access), without waiting for other writes to become
// durable: NBD_CMD_WRITE with NBD_CMD_FLAG_FUA where the server advertises
// NBD_FLAG_SEND_FUA, otherwise the write followed by a Flush.
func (d *Device) WriteAtFUA(p []byte, off int64) (int, error) {
	if err := d.enterWrite("write", off, int64(len(p))); err != nil {
		return 0, err
	}
	defer d.leave()
	if d.flags&tflagSendFUA != 0 {
		if err := d.write(p, off, cmdFlagFUA); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	if err := d.write(p, off, 0); err != nil {
		return 0, err
	}
	if err := d.flushLocked(); err != nil {
		return 0, err
	}
	return len(p), nil
}

// write writes p at off, inside the device: the partial blocks at either
// end by read-modify-write (N1), the aligned middle directly.
func (d *Device) write(p []byte, off int64, flags uint16) error {
	return d.edges(off, int64(len(p)), flags,
		func(b []byte, at int64) { copy(b, p[at-off:]) },
		func(lo, hi int64) error { return d.do(cmdWrite, flags, lo, hi-lo, p[lo-off:hi-off], nil) })
}

// edges splits [off, off+n) into partial minimum blocks at the ends, which
// it read-modify-writes with fill (given the block's buffer positioned at
// device offset at, fill copies in the new bytes that fall inside it), and
// an aligned middle [lo, hi), which it passes to middle. flags go with the
// read-modify-writes' writes.
func (d *Device) edges(off, n int64, flags uint16, fill func(b []byte, at int64), middle func(lo, hi int64) error) error {
	if n == 0 {
		return nil
	}
	end := off + n
	if d.minBlock == 1 {
		return middle(off, end)
	}
	headBlk, tailBlk := d.alignDown(off), d.alignDown(end-1)
	lo, hi := d.alignUp(off), d.alignDown(end)
	if off != headBlk {
		if err := d.rmw(headBlk, off, min(end, headBlk+d.minBlock), flags, fill); err != nil {
			return err
		}
	}
	if end != tailBlk+d.minBlock && (tailBlk != headBlk || off == headBlk) {
		if err := d.rmw(tailBlk, max(off, tailBlk), end, flags, fill); err != nil {
			return err
		}
	}
	if lo < hi {
		return middle(lo, hi)
	}
	return nil
}

// rmw rewrites bytes [from, to) of the minimum block at blk, holding the
// block's stripe lock across the read and the write.
func (d *Device) rmw(blk, from, to int64, flags uint16, fill func(b []byte, at int64)) error {
	mu := &d.rmwMu[uint64(blk/d.minBlock)%rmwStripes]
	mu.Lock()
	defer mu.Unlock()
	b := make([]byte, d.minBlock)
	if err := d.do(cmdRead, 0, blk, d.minBlock, nil, b); err != nil {
		return err
	}
	fill(b[from-blk:to-blk], from)
	return d.do(cmdWrite, flags, blk, d.minBlock, b, nil)
}

func (d *Device) alignDown(x int64) int64 { return x - x%d.minBlock }
func (d *Device) alignUp(x int64) int64 {
	if r := x % d.minBlock; r != 0 {
		return x + d.minBlock - r
	}
	return x
}

// Flush implements blockdev.Device with NBD_CMD_FLUSH on every connection
// (N4).
func (d *Device) Flush() error {
	if err := d.enter(); err != nil {
		return err
	}
	defer d.leave()
	return d.flushLocked()
}

// flushLocked flushes every connection; the caller holds closeMu shared.
func (d *Device) flushLocked() error {
	if d.flags&tflagSendFlush == 0 {
		return nil
	}
	if len(d.conns) == 1 {
		return d.doOn(d.conns[0], cmdFlush, 0, 0, 0, nil, nil)
	}
	errc := make(chan error, len(d.conns))
	for _, c := range d.conns {
		go func() { errc <- d.doOn(c, cmdFlush, 0, 0, 0, nil, nil) }()
	}
	var first error
	for range d.conns {
		if err := <-errc; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// ZeroOut implements blockdev.Device.
func (d *Device) ZeroOut(off, n int64) error {
	if err := d.enterWrite("zero out", off, n); err != nil {
		return err
	}
	defer d.leave()
	if d.flags&tflagSendWriteZeroes == 0 {
		return d.writeZeroes(off, n)
	}
	return d.edges(off, n, 0,
		func(b []byte, _ int64) { clear(b) },
		func(lo, hi int64) error { return d.do(cmdWriteZeroes, 0, lo, hi-lo, nil, nil) })
}

// zeroes is a shared, never-written buffer for servers without
// NBD_CMD_WRITE_ZEROES.
var zeroes = make([]byte, 1<<20)

func (d *Device) writeZeroes(off, n int64) error {
	for n > 0 {
		c := min(n, int64(len(zeroes)))
		if err := d.write(zeroes[:c], off, 0); err != nil {
			return err
		}
		off, n = off+c, n-c
	}
	return nil
}

// Discard implements blockdev.Device with NBD_CMD_TRIM on the whole
// minimum blocks inside the range.
func (d *Device) Discard(off, n int64) error {
	if err := d.enterWrite("discard", off, n); err != nil {
		return err
	}
	defer d.leave()
	lo, hi := d.alignUp(off), d.alignDown(off+n)
	if d.flags&tflagSendTrim == 0 || lo >= hi {
		return nil
	}
	return d.do(cmdTrim, 0, lo, hi-lo, nil, nil)
}

// Close sends NBD_CMD_DISC on every connection and closes them, after the
// operations in flight have finished.
func (d *Device) Close() error {
	d.closeMu.Lock()
	if d.closed {
		d.closeMu.Unlock()
		return devutil.Closed("nbd", d.label[len("nbd: "):])
	}
	d.closed = true
	d.closeMu.Unlock()
	d.disconnectAll()
	return nil
}

func (d *Device) disconnectAll() {
	var wg sync.WaitGroup
	for _, c := range d.conns {
		wg.Go(c.disconnect)
	}
	wg.Wait()
}

// pick returns the next usable connection, round-robin.
func (d *Device) pick() (*conn, error) {
	n := uint32(len(d.conns))
	if n == 1 {
		return d.conns[0], nil
	}
	i := d.next.Add(1)
	var first error
	for k := range n {
		c := d.conns[(i+k)%n]
		err := c.failed()
		if err == nil {
			return c, nil
		}
		if first == nil {
			first = err
		}
	}
	return nil, first
}

// do runs a command over [off, off+n) on one connection.
func (d *Device) do(typ, flags uint16, off, n int64, data, buf []byte) error {
	c, err := d.pick()
	if err != nil {
		return d.wrap(typ, off, err)
	}
	return d.doOn(c, typ, flags, off, n, data, buf)
}

// doOn runs a command on c, split into pieces of at most maxReq bytes (N2)
// that are all sent before the first is waited for. Each wait is bounded
// by the timeout afresh: the connection fails only when the server makes
// no progress for that long.
func (d *Device) doOn(c *conn, typ, flags uint16, off, n int64, data, buf []byte) error {
	step := d.maxReq
	if typ == cmdTrim {
		step = 1<<32 - d.minBlock // TRIM has no maximum but a 32-bit length
	}
	var calls [8]*call
	pending := calls[:0]
	var first error
	limit := c.timeout
	if typ == cmdFlush {
		limit = d.flushTimeout
	}
	timer := time.NewTimer(limit)
	defer timer.Stop()
	waitAll := func() {
		for _, cl := range pending {
			timer.Reset(limit) // Go 1.23 timers: no stale tick survives Reset
			if err := c.wait(cl, timer, limit); err != nil && first == nil {
				first = err
			}
		}
		pending = pending[:0]
	}
	for pos := int64(0); pos < n || (n == 0 && pos == 0); pos += step {
		k := min(step, n-pos)
		var dp, bp []byte
		if data != nil {
			dp = data[pos : pos+k]
		}
		if buf != nil {
			bp = buf[pos : pos+k]
		}
		cl, err := c.start(typ, flags, off+pos, k, dp, bp)
		if err != nil {
			first = err
			break
		}
		pending = append(pending, cl)
		if len(pending) == cap(calls) {
			waitAll() // bound what one call has in flight
		}
		if n == 0 {
			break
		}
	}
	waitAll()
	if first != nil {
		return d.wrap(typ, off, first)
	}
	return nil
}

func (d *Device) wrap(typ uint16, off int64, err error) error {
	return fmt.Errorf("%s: %s at %d: %w", d.label, cmdName(typ), off, err)
}
