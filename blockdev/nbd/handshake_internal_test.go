package nbd

import (
	"bytes"
	"encoding/binary"
	"io"
	"testing"
)

// serverStream is what a server sends during a handshake, for fuzz seeds.
func serverStream(hflags uint16, replies ...[]byte) []byte {
	b := binary.BigEndian.AppendUint64(nil, initPasswd)
	b = binary.BigEndian.AppendUint64(b, optMagic)
	b = binary.BigEndian.AppendUint16(b, hflags)
	for _, r := range replies {
		b = append(b, r...)
	}
	return b
}

func optReply(typ uint32, data []byte) []byte {
	b := binary.BigEndian.AppendUint64(nil, optReplyMagic)
	b = binary.BigEndian.AppendUint32(b, optGo)
	b = binary.BigEndian.AppendUint32(b, typ)
	b = binary.BigEndian.AppendUint32(b, uint32(len(data)))
	return append(b, data...)
}

// fakeRW reads a fixed server stream and discards what the client sends.
type fakeRW struct{ io.Reader }

func (fakeRW) Write(p []byte) (int, error) { return len(p), nil }

func TestHandshakeGo(t *testing.T) {
	info := binary.BigEndian.AppendUint16(nil, infoExport)
	info = binary.BigEndian.AppendUint64(info, 1<<30)
	info = binary.BigEndian.AppendUint16(info, tflagHasFlags|tflagSendFlush)
	bs := binary.BigEndian.AppendUint16(nil, infoBlockSize)
	for _, v := range []uint32{512, 4096, 1 << 20} {
		bs = binary.BigEndian.AppendUint32(bs, v)
	}
	s := serverStream(flagFixedNewstyle|flagNoZeroes, optReply(repInfo, info), optReply(repInfo, bs), optReply(repAck, nil))
	ex, err := handshake(fakeRW{bytes.NewReader(s)}, "e")
	if err != nil {
		t.Fatal(err)
	}
	want := export{size: 1 << 30, flags: tflagHasFlags | tflagSendFlush, minBlock: 512, prefBlk: 4096, maxBlock: 1 << 20}
	if ex != want {
		t.Fatalf("handshake = %+v, want %+v", ex, want)
	}
}

func FuzzHandshake(f *testing.F) {
	info := binary.BigEndian.AppendUint16(nil, infoExport)
	info = binary.BigEndian.AppendUint64(info, 1<<20)
	info = binary.BigEndian.AppendUint16(info, 1)
	bs := binary.BigEndian.AppendUint16(nil, infoBlockSize)
	bs = binary.BigEndian.AppendUint32(bs, 1)
	bs = binary.BigEndian.AppendUint32(bs, 4096)
	bs = binary.BigEndian.AppendUint32(bs, 1<<25)
	f.Add(serverStream(3, optReply(repInfo, info), optReply(repInfo, bs), optReply(repAck, nil)))
	f.Add(serverStream(1, optReply(repErrUnsup, nil), make([]byte, 134)))
	f.Add(serverStream(3, optReply(repErrUnknown, []byte("no such export"))))
	f.Fuzz(func(t *testing.T, s []byte) {
		ex, err := handshake(fakeRW{bytes.NewReader(s)}, "")
		if err != nil {
			return
		}
		// Whatever handshake accepts, geometry must judge without panicking.
		d := &Device{label: "nbd: fuzz"}
		d.geometry(ex)
	})
}
