package nbd

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/ext4io/ext4io/blockdev"
)

// simpleReplyBytes is a simple reply header for handle, with payload.
func simpleReplyBytes(errno uint32, handle uint64, payload []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, simpleMagic)
	b = binary.BigEndian.AppendUint32(b, errno)
	b = binary.BigEndian.AppendUint64(b, handle)
	return append(b, payload...)
}

// FuzzReplies feeds a transmission-phase connection a fuzzed reply stream
// for three requests in flight (a 512-byte read, a write, a flush): every
// call must end, before its deadline, with nil or an error wrapping ErrIO;
// no panic, no hang.
func FuzzReplies(f *testing.F) {
	data := bytes.Repeat([]byte{0xab}, 512)
	f.Add(append(append(simpleReplyBytes(0, 0, data), simpleReplyBytes(0, 1, nil)...), simpleReplyBytes(0, 2, nil)...))
	f.Add(append(simpleReplyBytes(0, 2, nil), simpleReplyBytes(5, 0, nil)...))
	f.Add(simpleReplyBytes(uint32(ESHUTDOWN), 1, nil))
	f.Add(simpleReplyBytes(0, 0, data[:100]))
	f.Add(simpleReplyBytes(0, 7, nil))
	f.Add(append(binary.BigEndian.AppendUint32(nil, 0x668e33ef), make([]byte, 16)...)) // a structured reply
	f.Fuzz(func(t *testing.T, stream []byte) {
		cli, srv := net.Pipe()
		defer srv.Close()
		c := &conn{nc: cli, br: bufio.NewReaderSize(cli, 64<<10), timeout: 2 * time.Second, label: "fuzz", readerDone: make(chan struct{})}
		c.mu.pending = make(map[uint64]*call)
		go io.Copy(io.Discard, srv)
		go c.reader()
		buf := make([]byte, 512)
		var calls []*call
		for _, r := range []struct {
			typ  uint16
			data []byte
			buf  []byte
		}{{cmdRead, nil, buf}, {cmdWrite, data, nil}, {cmdFlush, nil, nil}} {
			n := int64(len(r.data) + len(r.buf))
			cl, err := c.start(r.typ, 0, 0, n, r.data, r.buf)
			if err != nil {
				if !errors.Is(err, blockdev.ErrIO) {
					t.Fatalf("start: %v does not wrap ErrIO", err)
				}
				continue
			}
			calls = append(calls, cl)
		}
		// The replies come after every request went out, then the
		// server hangs up.
		go func() {
			srv.Write(stream)
			srv.Close()
		}()
		for i, cl := range calls {
			err := c.wait(cl, time.NewTimer(5*time.Second), 5*time.Second)
			if err != nil && !errors.Is(err, blockdev.ErrIO) {
				t.Fatalf("call %d: %v does not wrap ErrIO", i, err)
			}
			if err != nil && errors.Is(err, errClosedConn) {
				t.Fatalf("call %d: %v before the client closed", i, err)
			}
		}
		done := make(chan struct{})
		go func() { c.disconnect(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("disconnect did not return")
		}
	})
}
