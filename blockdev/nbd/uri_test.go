package nbd_test

import (
	"errors"
	"testing"

	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/nbd"
)

func TestParseURI(t *testing.T) {
	tests := []struct {
		name string
		uri  string
		want nbd.Address
		err  error
	}{
		{"tcp default port", "nbd://example.com/disk", nbd.Address{"tcp", "example.com:10809", "disk"}, nil},
		{"tcp port", "nbd://10.0.0.1:1234/disk", nbd.Address{"tcp", "10.0.0.1:1234", "disk"}, nil},
		{"tcp no path", "nbd://localhost", nbd.Address{"tcp", "localhost:10809", ""}, nil},
		{"tcp slash only", "nbd://localhost/", nbd.Address{"tcp", "localhost:10809", ""}, nil},
		{"explicit tcp", "nbd+tcp://h:1/e", nbd.Address{"tcp", "h:1", "e"}, nil},
		{"ipv6", "nbd://[::1]:10810/x", nbd.Address{"tcp", "[::1]:10810", "x"}, nil},
		{"ipv6 default port", "nbd://[fe80::1]/", nbd.Address{"tcp", "[fe80::1]:10809", ""}, nil},
		{"escaped export", "nbd://h/a%20b%2Fc", nbd.Address{"tcp", "h:10809", "a b/c"}, nil},
		{"leading slash in export", "nbd://h//abs/path", nbd.Address{"tcp", "h:10809", "/abs/path"}, nil},
		{"uppercase scheme", "NBD://h/e", nbd.Address{"tcp", "h:10809", "e"}, nil},
		{"ignored query", "nbd://h/e?tls-hostname=x", nbd.Address{"tcp", "h:10809", "e"}, nil},
		{"unix", "nbd+unix:///disk?socket=/run/nbd.sock", nbd.Address{"unix", "/run/nbd.sock", "disk"}, nil},
		{"unix default export", "nbd+unix://?socket=/tmp/s", nbd.Address{"unix", "/tmp/s", ""}, nil},
		{"unix escaped socket", "nbd+unix:///?socket=/tmp/a%20b", nbd.Address{"unix", "/tmp/a b", ""}, nil},
		{"unix relative socket", "nbd+unix:///e?socket=rel.sock", nbd.Address{"unix", "rel.sock", "e"}, nil},

		{"tls", "nbds://h/e", nbd.Address{}, blockdev.ErrUnsupported},
		{"tls unix", "nbds+unix:///e?socket=/s", nbd.Address{}, blockdev.ErrUnsupported},
		{"vsock", "nbd+vsock://1:10809/e", nbd.Address{}, blockdev.ErrUnsupported},
		{"other scheme", "http://h/e", nbd.Address{}, blockdev.ErrInvalid},
		{"no scheme", "h:10809/e", nbd.Address{}, blockdev.ErrInvalid},
		{"opaque", "nbd:h/e", nbd.Address{}, blockdev.ErrInvalid},
		{"no host", "nbd:///e", nbd.Address{}, blockdev.ErrInvalid},
		{"bad port", "nbd://h:port/e", nbd.Address{}, blockdev.ErrInvalid},
		{"port zero", "nbd://h:0/e", nbd.Address{}, blockdev.ErrInvalid},
		{"port too big", "nbd://h:65536/e", nbd.Address{}, blockdev.ErrInvalid},
		{"empty port", "nbd://h:/e", nbd.Address{}, blockdev.ErrInvalid},
		{"user", "nbd://u@h/e", nbd.Address{}, blockdev.ErrInvalid},
		{"fragment", "nbd://h/e#f", nbd.Address{}, blockdev.ErrInvalid},
		{"socket on tcp", "nbd://h/e?socket=/s", nbd.Address{}, blockdev.ErrInvalid},
		{"unix without socket", "nbd+unix:///e", nbd.Address{}, blockdev.ErrInvalid},
		{"unix empty socket", "nbd+unix:///e?socket=", nbd.Address{}, blockdev.ErrInvalid},
		{"unix two sockets", "nbd+unix:///e?socket=/a&socket=/b", nbd.Address{}, blockdev.ErrInvalid},
		{"unix with host", "nbd+unix://h/e?socket=/s", nbd.Address{}, blockdev.ErrInvalid},
		{"bad escape", "nbd://h/%zz", nbd.Address{}, blockdev.ErrInvalid},
		{"unbracketed ipv6", "nbd://::1", nbd.Address{}, blockdev.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := nbd.ParseURI(tt.uri)
			if tt.err != nil {
				if !errors.Is(err, tt.err) {
					t.Fatalf("ParseURI(%q) = %+v, %v; want error %v", tt.uri, got, err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseURI(%q) = %+v, %v; want %+v", tt.uri, got, err, tt.want)
			}
			// String gives a URI that parses back to the same address.
			back, err := nbd.ParseURI(got.String())
			if err != nil || back != got {
				t.Fatalf("ParseURI(%q) (from String) = %+v, %v; want %+v", got.String(), back, err, got)
			}
		})
	}
}

func FuzzParseURI(f *testing.F) {
	for _, s := range []string{"nbd://h/e", "nbd+unix:///e?socket=/s", "nbd://[::1]:1/x%20y", "nbds://h"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := nbd.ParseURI(s)
		if err != nil {
			return
		}
		b, err := nbd.ParseURI(a.String())
		if err != nil || b != a {
			t.Fatalf("%q parsed to %+v, whose String %q parses to %+v, %v", s, a, a.String(), b, err)
		}
	})
}

func TestIsURI(t *testing.T) {
	for s, want := range map[string]bool{
		"nbd://h/e":               true,
		"nbd+unix:///e?socket=/s": true,
		"NBDS+unix:///?socket=/s": true,
		"nbd+vsock://1/e":         true,
		"disk.img":                false,
		"/dev/sdb":                false,
		"nbdfile.img":             false,
		"./nbd://x":               false,
		"http://h/e":              false,
		"nbdx://h":                false,
	} {
		if got := nbd.IsURI(s); got != want {
			t.Errorf("IsURI(%q) = %v, want %v", s, got, want)
		}
	}
}
