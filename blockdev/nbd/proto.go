package nbd

import (
	"encoding/binary"
	"fmt"
)

// Protocol constants, from the NBD protocol document (proto.md). They are
// part of the wire format and must not change. All integers on the wire are
// big-endian (network byte order).
const (
	initPasswd    = 0x4e42444d41474943 // "NBDMAGIC", first 8 bytes from the server
	optMagic      = 0x49484156454f5054 // "IHAVEOPT", newstyle handshake and every option
	optReplyMagic = 0x0003e889045565a9 // option reply magic
	requestMagic  = 0x25609513         // NBD_REQUEST_MAGIC
	simpleMagic   = 0x67446698         // NBD_SIMPLE_REPLY_MAGIC
	structMagic   = 0x668e33ef         // NBD_STRUCTURED_REPLY_MAGIC (never negotiated here)

	// DefaultPort is the IANA-reserved NBD port, used by nbd:// URIs
	// without a port.
	DefaultPort = 10809
)

// Handshake flags (server) and client flags.
const (
	flagFixedNewstyle  = 1 << 0 // NBD_FLAG_FIXED_NEWSTYLE
	flagNoZeroes       = 1 << 1 // NBD_FLAG_NO_ZEROES
	flagCFixedNewstyle = 1 << 0 // NBD_FLAG_C_FIXED_NEWSTYLE
	flagCNoZeroes      = 1 << 1 // NBD_FLAG_C_NO_ZEROES
)

// Transmission flags, sent with the export size.
const (
	tflagHasFlags         = 1 << 0  // NBD_FLAG_HAS_FLAGS, always set
	tflagReadOnly         = 1 << 1  // NBD_FLAG_READ_ONLY
	tflagSendFlush        = 1 << 2  // NBD_FLAG_SEND_FLUSH
	tflagSendFUA          = 1 << 3  // NBD_FLAG_SEND_FUA
	tflagRotational       = 1 << 4  // NBD_FLAG_ROTATIONAL
	tflagSendTrim         = 1 << 5  // NBD_FLAG_SEND_TRIM
	tflagSendWriteZeroes  = 1 << 6  // NBD_FLAG_SEND_WRITE_ZEROES
	tflagSendDF           = 1 << 7  // NBD_FLAG_SEND_DF
	tflagCanMultiConn     = 1 << 8  // NBD_FLAG_CAN_MULTI_CONN
	tflagSendResize       = 1 << 9  // NBD_FLAG_SEND_RESIZE
	tflagSendCache        = 1 << 10 // NBD_FLAG_SEND_CACHE
	tflagSendFastZero     = 1 << 11 // NBD_FLAG_SEND_FAST_ZERO
	tflagBlockStatPayload = 1 << 12 // NBD_FLAG_BLOCK_STAT_PAYLOAD
)

// Option types.
const (
	optExportName = 1 // NBD_OPT_EXPORT_NAME
	optAbort      = 2 // NBD_OPT_ABORT
	optGo         = 7 // NBD_OPT_GO
)

// Option reply types. Errors have bit 31 set.
const (
	repAck            = 1 // NBD_REP_ACK
	repInfo           = 3 // NBD_REP_INFO
	repFlagError      = 1 << 31
	repErrUnsup       = repFlagError | 1 // NBD_REP_ERR_UNSUP
	repErrPolicy      = repFlagError | 2 // NBD_REP_ERR_POLICY
	repErrInvalid     = repFlagError | 3 // NBD_REP_ERR_INVALID
	repErrPlatform    = repFlagError | 4 // NBD_REP_ERR_PLATFORM
	repErrTLSReqd     = repFlagError | 5 // NBD_REP_ERR_TLS_REQD
	repErrUnknown     = repFlagError | 6 // NBD_REP_ERR_UNKNOWN (no such export)
	repErrShutdown    = repFlagError | 7 // NBD_REP_ERR_SHUTDOWN
	repErrBlockSizeRq = repFlagError | 8 // NBD_REP_ERR_BLOCK_SIZE_REQD
	repErrTooBig      = repFlagError | 9 // NBD_REP_ERR_TOO_BIG
)

// Information types requested with NBD_OPT_GO and returned in NBD_REP_INFO.
const (
	infoExport    = 0 // NBD_INFO_EXPORT: size (64) and transmission flags (16)
	infoBlockSize = 3 // NBD_INFO_BLOCK_SIZE: minimum, preferred, maximum (32 each)
)

// Command types.
const (
	cmdRead        = 0 // NBD_CMD_READ
	cmdWrite       = 1 // NBD_CMD_WRITE
	cmdDisc        = 2 // NBD_CMD_DISC
	cmdFlush       = 3 // NBD_CMD_FLUSH
	cmdTrim        = 4 // NBD_CMD_TRIM
	cmdWriteZeroes = 6 // NBD_CMD_WRITE_ZEROES
)

// Command flags.
const (
	cmdFlagFUA    = 1 << 0 // NBD_CMD_FLAG_FUA
	cmdFlagNoHole = 1 << 1 // NBD_CMD_FLAG_NO_HOLE
)

// Sizes of fixed-size messages.
const (
	requestLen    = 28 // magic 4, flags 2, type 2, handle 8, offset 8, length 4
	simpleHdrLen  = 16 // magic 4, error 4, handle 8
	optReplyHdr   = 20 // magic 8, option 4, type 4, length 4
	maxOptReply   = 64 << 10
	defaultMaxReq = 32 << 20 // the protocol's interoperable READ/WRITE limit
)

// request mirrors the NBD request header:
//
//	0x00  u32 magic (0x25609513)
//	0x04  u16 command flags
//	0x06  u16 type
//	0x08  u64 handle (cookie)
//	0x10  u64 offset
//	0x18  u32 length
//	0x1c  (length bytes of data for NBD_CMD_WRITE)
type request struct {
	flags  uint16
	typ    uint16
	handle uint64
	off    uint64
	length uint32
}

func (r *request) encode(b *[requestLen]byte) {
	binary.BigEndian.PutUint32(b[0x00:], requestMagic)
	binary.BigEndian.PutUint16(b[0x04:], r.flags)
	binary.BigEndian.PutUint16(b[0x06:], r.typ)
	binary.BigEndian.PutUint64(b[0x08:], r.handle)
	binary.BigEndian.PutUint64(b[0x10:], r.off)
	binary.BigEndian.PutUint32(b[0x18:], r.length)
}

// simpleReply mirrors the NBD simple reply header:
//
//	0x00  u32 magic (0x67446698)
//	0x04  u32 error (0 on success)
//	0x08  u64 handle, as in the request
//	0x10  (request length bytes of data for a successful NBD_CMD_READ)
type simpleReply struct {
	errno  uint32
	handle uint64
}

func decodeSimpleReply(b *[simpleHdrLen]byte) (simpleReply, error) {
	if m := binary.BigEndian.Uint32(b[0:]); m != simpleMagic {
		return simpleReply{}, fmt.Errorf("reply magic %#x != %#x", m, simpleMagic)
	}
	return simpleReply{
		errno:  binary.BigEndian.Uint32(b[4:]),
		handle: binary.BigEndian.Uint64(b[8:]),
	}, nil
}

// cmdName names a command type for error messages.
func cmdName(typ uint16) string {
	switch typ {
	case cmdRead:
		return "read"
	case cmdWrite:
		return "write"
	case cmdDisc:
		return "disconnect"
	case cmdFlush:
		return "flush"
	case cmdTrim:
		return "trim"
	case cmdWriteZeroes:
		return "write zeroes"
	}
	return fmt.Sprintf("command %d", typ)
}

// optReplyName names an option reply type for error messages.
func optReplyName(t uint32) string {
	switch t {
	case repErrUnsup:
		return "unsupported option"
	case repErrPolicy:
		return "forbidden by server policy"
	case repErrInvalid:
		return "invalid option"
	case repErrPlatform:
		return "unsupported on the server's platform"
	case repErrTLSReqd:
		return "TLS required (or no such export)"
	case repErrUnknown:
		return "no such export"
	case repErrShutdown:
		return "server shutting down"
	case repErrBlockSizeRq:
		return "block size negotiation required"
	case repErrTooBig:
		return "request too big"
	}
	return fmt.Sprintf("reply type %#x", t)
}
