package nbd

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/ext4io/ext4io/blockdev"
)

// Address says where an export is: a network and address for net.Dial and
// the export name. It is a plain value.
type Address struct {
	Network string // "tcp" or "unix"
	Addr    string // "host:port" for tcp, a socket path for unix
	Export  string // export name; "" is the server's default export
}

// String returns a as an NBD URI.
func (a Address) String() string {
	exp := (&url.URL{Path: "/" + a.Export}).EscapedPath()
	if a.Network == "unix" {
		return "nbd+unix://" + exp + "?socket=" + strings.ReplaceAll(url.QueryEscape(a.Addr), "%2F", "/")
	}
	return "nbd://" + a.Addr + exp
}

// IsURI reports whether s looks like an NBD URI (its scheme is nbd, nbds or
// one of their +transport forms), so a command taking an image path or a
// URI knows which to open. It does not validate the rest: ParseURI does.
func IsURI(s string) bool {
	scheme, _, ok := strings.Cut(s, "://")
	if !ok {
		return false
	}
	base, _, _ := strings.Cut(strings.ToLower(scheme), "+")
	return base == "nbd" || base == "nbds"
}

// ParseURI parses an NBD URI, as the NBD URI specification defines:
//
//	nbd://host[:port][/export]            TCP, port 10809 by default
//	nbd+tcp://host[:port][/export]        the same
//	nbd+unix:///[export]?socket=PATH      a Unix domain socket
//
// The export name is the percent-decoded path after its leading slash, so
// nbd://h//x names the export "/x". IPv6 hosts are bracketed
// (nbd://[::1]:10809/). TLS (nbds://, nbds+unix://) and vsock transports
// fail with blockdev.ErrUnsupported; anything else malformed fails with
// blockdev.ErrInvalid. Query parameters other than socket are ignored.
func ParseURI(s string) (Address, error) {
	bad := func(format string, args ...any) (Address, error) {
		return Address{}, fmt.Errorf("nbd: URI %q: %s: %w", s, fmt.Sprintf(format, args...), blockdev.ErrInvalid)
	}
	u, err := url.Parse(s)
	if err != nil {
		return Address{}, fmt.Errorf("nbd: URI %q: %w: %w", s, blockdev.ErrInvalid, err)
	}
	scheme := strings.ToLower(u.Scheme)
	transport := "tcp"
	switch scheme {
	case "nbd", "nbd+tcp":
	case "nbd+unix":
		transport = "unix"
	case "nbds", "nbds+tcp", "nbds+unix", "nbd+vsock", "nbds+vsock":
		return Address{}, fmt.Errorf("nbd: URI %q: scheme %s (TLS or vsock) not supported: %w", s, u.Scheme, blockdev.ErrUnsupported)
	default:
		return bad("scheme %q is not nbd, nbd+tcp or nbd+unix", u.Scheme)
	}
	if u.Opaque != "" {
		return bad("want %s://...", scheme)
	}
	if u.User != nil {
		return bad("user names are not supported")
	}
	if u.Fragment != "" {
		return bad("fragment not allowed")
	}
	export := ""
	if u.Path != "" {
		if u.Path[0] != '/' {
			return bad("export path %q does not start with /", u.Path)
		}
		export = u.Path[1:]
	}
	if len(export) > 4096 {
		return bad("export name longer than 4096 bytes")
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return Address{}, fmt.Errorf("nbd: URI %q: query: %w: %w", s, blockdev.ErrInvalid, err)
	}
	a := Address{Network: transport, Export: export}
	if transport == "unix" {
		if u.Host != "" {
			return bad("nbd+unix URIs take no host (nbd+unix:///export?socket=PATH)")
		}
		socks := q["socket"]
		if len(socks) != 1 || socks[0] == "" {
			return bad("nbd+unix needs exactly one socket= parameter")
		}
		a.Addr = socks[0]
		return a, nil
	}
	if q.Has("socket") {
		return bad("socket= is only for nbd+unix")
	}
	host := u.Hostname()
	if host == "" {
		return bad("no host")
	}
	if strings.Contains(host, ":") && !strings.HasPrefix(u.Host, "[") {
		return bad("IPv6 host %q must be bracketed", u.Host)
	}
	port := DefaultPort
	if p := u.Port(); p != "" {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil || n == 0 {
			return bad("bad port %q", p)
		}
		port = int(n)
	} else if strings.HasSuffix(u.Host, ":") {
		return bad("empty port")
	}
	a.Addr = net.JoinHostPort(host, strconv.Itoa(port))
	return a, nil
}
