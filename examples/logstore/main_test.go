package main

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev/memdev"
)

func TestRun(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out, 1000); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range []string{"1000 puts: 1000 overwrites, 0 metadata updates, log tail at 4096000 bytes",
		`reopened: 500 keys, tail at 4096000 bytes; key-007 = "value 507" (found true)`} {
		if !strings.Contains(s, want) {
			t.Fatalf("output lacks %q:\n%s", want, s)
		}
	}
}

// TestConcurrentPutsAndReopen checks the store against a map model with
// concurrent writers, then after a reopen.
func TestConcurrentPutsAndReopen(t *testing.T) {
	dev := memdev.New(64 << 20)
	if err := ext4io.Format(dev, ext4io.FormatOptions{}); err != nil {
		t.Fatal(err)
	}
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true})
	if err != nil {
		t.Fatal(err)
	}
	s, err := Create(v, "/log")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				if err := s.Put(fmt.Sprintf("g%d-k%d", g, i%50), bytes.Repeat([]byte{byte(i)}, i*7)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	check := func(s *Store) {
		t.Helper()
		for g := range 4 {
			for k := range 50 {
				i := 150 + k // the last put of key k
				got, ok, err := s.Get(fmt.Sprintf("g%d-k%d", g, k))
				if err != nil || !ok || !bytes.Equal(got, bytes.Repeat([]byte{byte(i)}, i*7)) {
					t.Fatalf("g%d-k%d: ok=%v err=%v len %d", g, k, ok, err, len(got))
				}
			}
		}
	}
	check(s)
	s.Close()
	v.Close()
	v, err = ext4io.Open(dev, ext4io.Options{Writable: true})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	s2, err := Open(v, "/log")
	if err != nil {
		t.Fatal(err)
	}
	check(s2)
	if _, ok, _ := s2.Get("missing"); ok {
		t.Fatal("missing key found")
	}
}
