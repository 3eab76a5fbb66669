package nbd

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/internal/errs"
)

// export is what the handshake learned about the export.
type export struct {
	size     uint64
	flags    uint16 // transmission flags
	minBlock uint32 // 0 if not advertised
	prefBlk  uint32
	maxBlock uint32
}

// call is one request in flight. Exactly one party delivers its result:
// whoever removes it from conn.mu.pending (the reader goroutine on a reply,
// or fail on a dead connection). Until then the reader may be filling buf,
// so the caller must not touch buf before receiving from done.
type call struct {
	typ  uint16
	off  int64
	n    int64
	buf  []byte     // destination of a read's payload
	done chan error // buffered, receives exactly once
}

var callPool = sync.Pool{New: func() any { return &call{done: make(chan error, 1)} }}

// conn is one transmission-phase connection. Requests are written under
// wmu; one reader goroutine reads replies and matches them to calls by
// handle, so any number of requests may be in flight. It is safe for
// concurrent use.
type conn struct {
	nc      net.Conn
	br      *bufio.Reader // the reader goroutine's: a header and a small payload in one read(2)
	timeout time.Duration
	label   string

	wmu  sync.Mutex // serialises request writes; never held while waiting for a reply
	wbuf [requestLen]byte

	mu struct {
		sync.Mutex
		next    uint64           // next handle
		pending map[uint64]*call // requests sent or being sent, by handle
		err     error            // set once the connection is unusable
	}
	readerDone chan struct{}
}

// dial connects to addr and runs the fixed-newstyle handshake for export,
// all within timeout.
func dial(network, addr, exportName string, timeout time.Duration, label string) (*conn, export, error) {
	nc, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		return nil, export{}, fmt.Errorf("%s: dial %s %s: %w: %w", label, network, addr, blockdev.ErrIO, err)
	}
	nc.SetDeadline(time.Now().Add(timeout))
	ex, err := handshake(nc, exportName)
	if err != nil {
		nc.Close()
		return nil, export{}, fmt.Errorf("%s: handshake: %w", label, err)
	}
	nc.SetDeadline(time.Time{})
	c := &conn{nc: nc, br: bufio.NewReaderSize(nc, 64<<10), timeout: timeout, label: label, readerDone: make(chan struct{})}
	c.mu.pending = make(map[uint64]*call)
	go c.reader()
	return c, ex, nil
}

// ioErr wraps a network error with what was being done and ErrIO.
func ioErr(what string, err error) error {
	return fmt.Errorf("%s: %w: %w", what, blockdev.ErrIO, err)
}

// handshake runs the fixed-newstyle negotiation with NBD_OPT_GO, asking for
// NBD_INFO_EXPORT and NBD_INFO_BLOCK_SIZE. A server that does not know
// NBD_OPT_GO gets NBD_OPT_EXPORT_NAME instead.
func handshake(rw io.ReadWriter, name string) (export, error) {
	var ex export
	if len(name) > 4096 {
		return ex, fmt.Errorf("export name of %d bytes is longer than 4096: %w", len(name), blockdev.ErrInvalid)
	}
	// S: NBDMAGIC, IHAVEOPT, 16-bit handshake flags.
	var hello [18]byte
	if _, err := io.ReadFull(rw, hello[:16]); err != nil {
		return ex, ioErr("read greeting", err)
	}
	if m := binary.BigEndian.Uint64(hello[0:]); m != initPasswd {
		return ex, fmt.Errorf("greeting magic %#x is not NBDMAGIC: %w", m, blockdev.ErrIO)
	}
	if m := binary.BigEndian.Uint64(hello[8:]); m != optMagic {
		return ex, fmt.Errorf("oldstyle or unknown negotiation (magic %#x): %w", m, blockdev.ErrUnsupported)
	}
	if _, err := io.ReadFull(rw, hello[16:]); err != nil {
		return ex, ioErr("read handshake flags", err)
	}
	hflags := binary.BigEndian.Uint16(hello[16:])
	if hflags&flagFixedNewstyle == 0 {
		return ex, fmt.Errorf("server does not offer fixed newstyle negotiation: %w", blockdev.ErrUnsupported)
	}
	cflags := uint32(flagCFixedNewstyle)
	noZeroes := hflags&flagNoZeroes != 0
	if noZeroes {
		cflags |= flagCNoZeroes
	}
	// C: client flags, then NBD_OPT_GO with its data: u32 name length,
	// name, u16 number of info requests, u16 each.
	msg := binary.BigEndian.AppendUint32(nil, cflags)
	data := binary.BigEndian.AppendUint32(nil, uint32(len(name)))
	data = append(data, name...)
	data = binary.BigEndian.AppendUint16(data, 2)
	data = binary.BigEndian.AppendUint16(data, infoExport)
	data = binary.BigEndian.AppendUint16(data, infoBlockSize)
	msg = appendOption(msg, optGo, data)
	if _, err := rw.Write(msg); err != nil {
		return ex, ioErr("send NBD_OPT_GO", err)
	}
	gotExport := false
	for {
		typ, payload, err := readOptReply(rw, optGo)
		if err != nil {
			return ex, err
		}
		switch {
		case typ == repAck:
			if !gotExport {
				return ex, fmt.Errorf("NBD_OPT_GO acknowledged without NBD_INFO_EXPORT: %w", blockdev.ErrIO)
			}
			return ex, nil
		case typ == repInfo:
			if len(payload) < 2 {
				return ex, fmt.Errorf("NBD_REP_INFO of %d bytes: %w", len(payload), blockdev.ErrIO)
			}
			switch binary.BigEndian.Uint16(payload) {
			case infoExport:
				if len(payload) != 12 {
					return ex, fmt.Errorf("NBD_INFO_EXPORT of %d bytes, want 12: %w", len(payload), blockdev.ErrIO)
				}
				ex.size = binary.BigEndian.Uint64(payload[2:])
				ex.flags = binary.BigEndian.Uint16(payload[10:])
				gotExport = true
			case infoBlockSize:
				if len(payload) != 14 {
					return ex, fmt.Errorf("NBD_INFO_BLOCK_SIZE of %d bytes, want 14: %w", len(payload), blockdev.ErrIO)
				}
				ex.minBlock = binary.BigEndian.Uint32(payload[2:])
				ex.prefBlk = binary.BigEndian.Uint32(payload[6:])
				ex.maxBlock = binary.BigEndian.Uint32(payload[10:])
			}
			// Other information types (name, description) are ignored.
		case typ == repErrUnsup:
			return exportName(rw, name, noZeroes)
		case typ&repFlagError != 0:
			var sentinel error = blockdev.ErrIO
			switch typ {
			case repErrUnknown, repErrTLSReqd:
				sentinel = errs.ErrNotFound
			}
			msg := ""
			if len(payload) > 0 {
				msg = fmt.Sprintf(" (%q)", payload)
			}
			return ex, fmt.Errorf("export %q: %s%s: %w", name, optReplyName(typ), msg, sentinel)
		default:
			return ex, fmt.Errorf("unexpected reply type %d to NBD_OPT_GO: %w", typ, blockdev.ErrIO)
		}
	}
}

// exportName is the fallback for servers without NBD_OPT_GO: S replies
// with u64 size, u16 transmission flags and (unless NO_ZEROES) 124 zeroes.
func exportName(rw io.ReadWriter, name string, noZeroes bool) (export, error) {
	var ex export
	if _, err := rw.Write(appendOption(nil, optExportName, []byte(name))); err != nil {
		return ex, ioErr("send NBD_OPT_EXPORT_NAME", err)
	}
	n := 10
	if !noZeroes {
		n += 124
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(rw, b); err != nil {
		return ex, ioErr(fmt.Sprintf("NBD_OPT_EXPORT_NAME %q (no such export?)", name), err)
	}
	ex.size = binary.BigEndian.Uint64(b)
	ex.flags = binary.BigEndian.Uint16(b[8:])
	return ex, nil
}

// appendOption appends an option request: IHAVEOPT, u32 option, u32
// length, data.
func appendOption(b []byte, opt uint32, data []byte) []byte {
	b = binary.BigEndian.AppendUint64(b, optMagic)
	b = binary.BigEndian.AppendUint32(b, opt)
	b = binary.BigEndian.AppendUint32(b, uint32(len(data)))
	return append(b, data...)
}

// readOptReply reads one option reply to opt: u64 magic, u32 option, u32
// type, u32 length, payload.
func readOptReply(r io.Reader, opt uint32) (typ uint32, payload []byte, err error) {
	var h [optReplyHdr]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, ioErr("read option reply", err)
	}
	if m := binary.BigEndian.Uint64(h[0:]); m != optReplyMagic {
		return 0, nil, fmt.Errorf("option reply magic %#x != %#x: %w", m, uint64(optReplyMagic), blockdev.ErrIO)
	}
	if o := binary.BigEndian.Uint32(h[8:]); o != opt {
		return 0, nil, fmt.Errorf("reply to option %d, want %d: %w", o, opt, blockdev.ErrIO)
	}
	typ = binary.BigEndian.Uint32(h[12:])
	n := binary.BigEndian.Uint32(h[16:])
	if n > maxOptReply {
		return 0, nil, fmt.Errorf("option reply of %d bytes: %w", n, blockdev.ErrIO)
	}
	payload = make([]byte, n)
	if _, err := io.ReadFull(r, payload); err != nil {
		return 0, nil, ioErr("read option reply", err)
	}
	return typ, payload, nil
}

// reader reads simple replies until the connection fails, delivering each
// to its call.
func (c *conn) reader() {
	defer close(c.readerDone)
	var h [simpleHdrLen]byte
	for {
		if _, err := io.ReadFull(c.br, h[:]); err != nil {
			c.fail(ioErr("read reply", err))
			return
		}
		rep, err := decodeSimpleReply(&h)
		if err != nil {
			// A structured reply or garbage: the stream cannot be resynchronised.
			c.fail(fmt.Errorf("%w: %w", blockdev.ErrIO, err))
			return
		}
		c.mu.Lock()
		cl := c.mu.pending[rep.handle]
		delete(c.mu.pending, rep.handle)
		c.mu.Unlock()
		if cl == nil {
			c.fail(fmt.Errorf("reply for unknown handle %#x: %w", rep.handle, blockdev.ErrIO))
			return
		}
		if rep.errno != 0 {
			cl.done <- &ServerError{Cmd: cmdName(cl.typ), Off: cl.off, Len: cl.n, Errno: Errno(rep.errno)}
			if Errno(rep.errno) == ESHUTDOWN {
				// The server is going away: the client must initiate a
				// soft disconnect and send nothing more.
				c.sendDisc()
				c.fail(fmt.Errorf("server shutting down: %w", blockdev.ErrIO))
				return
			}
			continue
		}
		if cl.typ == cmdRead {
			if _, err := io.ReadFull(c.br, cl.buf); err != nil {
				err = c.fail(ioErr("read data", err))
				cl.done <- err
				return
			}
		}
		cl.done <- nil
	}
}

// fail marks the connection unusable with err (unless already failed),
// fails every pending call and closes the socket, which ends the reader.
// It returns the connection's first error.
func (c *conn) fail(err error) error {
	c.mu.Lock()
	if c.mu.err != nil {
		err = c.mu.err
		c.mu.Unlock()
		return err
	}
	c.mu.err = err
	pending := c.mu.pending
	c.mu.pending = nil
	c.mu.Unlock()
	for _, cl := range pending {
		cl.done <- err
	}
	c.nc.Close()
	return err
}

// failed reports the connection's error, nil while it is usable.
func (c *conn) failed() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.err
}

// start sends a request. For cmdWrite, data is its payload; for cmdRead,
// buf receives the reply's payload. The caller must wait for the call.
func (c *conn) start(typ, flags uint16, off int64, n int64, data, buf []byte) (*call, error) {
	cl := callPool.Get().(*call)
	cl.typ, cl.off, cl.n, cl.buf = typ, off, n, buf
	c.mu.Lock()
	if c.mu.err != nil {
		err := c.mu.err
		c.mu.Unlock()
		callPool.Put(cl)
		return nil, err
	}
	h := c.mu.next
	c.mu.next++
	c.mu.pending[h] = cl
	c.mu.Unlock()

	r := request{flags: flags, typ: typ, handle: h, off: uint64(off), length: uint32(n)}
	c.wmu.Lock()
	r.encode(&c.wbuf)
	c.nc.SetWriteDeadline(time.Now().Add(c.timeout))
	var err error
	if len(data) > 0 {
		bufs := net.Buffers{c.wbuf[:], data}
		_, err = bufs.WriteTo(c.nc)
	} else {
		_, err = c.nc.Write(c.wbuf[:])
	}
	c.wmu.Unlock()
	if err != nil {
		// A partly written request leaves the stream unusable. fail
		// delivers to the call (still pending) unless a reply already did.
		c.fail(ioErr("send "+cmdName(typ), err))
	}
	return cl, nil
}

// wait waits for cl until deadline. A request not answered by then fails
// the whole connection: its reply might still come, and the stream cannot
// tell a late reply from a lost one. wait returns only once the reader has
// finished with cl.buf.
func (c *conn) wait(cl *call, deadline *time.Timer, limit time.Duration) error {
	var err error
	select {
	case err = <-cl.done:
	case <-deadline.C:
		c.fail(fmt.Errorf("no reply to %s within %v (server dead or stalled): %w", cmdName(cl.typ), limit, blockdev.ErrIO))
		err = <-cl.done
	}
	cl.buf = nil
	callPool.Put(cl)
	return err
}

// disconnect sends NBD_CMD_DISC (best effort, bounded by the timeout) and
// closes the connection.
func (c *conn) disconnect() {
	if c.failed() == nil {
		c.sendDisc()
	}
	c.fail(errClosedConn)
	<-c.readerDone
}

// sendDisc sends NBD_CMD_DISC, best effort.
func (c *conn) sendDisc() {
	r := request{typ: cmdDisc}
	c.wmu.Lock()
	r.encode(&c.wbuf)
	c.nc.SetWriteDeadline(time.Now().Add(c.timeout))
	c.nc.Write(c.wbuf[:])
	c.wmu.Unlock()
}

var errClosedConn = errors.New("nbd: connection closed")
