package main

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/fusefs"
)

const mountUsage = "mount [-o ro,allow_other,default_permissions,direct_io,debug,...] [-d] IMAGE DIR   (serve IMAGE at DIR over FUSE until unmounted)"

// cmdMount serves an image over FUSE in the foreground. SIGINT, SIGTERM,
// fusermount3 -u and umount unmount it; then the volume is closed, which
// writes back, commits and marks the file system clean.
func cmdMount(args []string, w io.Writer) error {
	var o fusefs.Options
	var pos []string
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "-o":
			if i+1 >= len(args) {
				return errUsage
			}
			i++
			for _, opt := range strings.Split(args[i], ",") {
				switch opt {
				case "":
				case "ro":
					o.ReadOnly = true
				case "rw":
					o.ReadOnly = false
				case "allow_other":
					o.AllowOther = true
				case "default_permissions":
					o.NoDefaultPermissions = false
				case "no_default_permissions":
					o.NoDefaultPermissions = true
				case "direct_io":
					o.DirectIO = true
				case "debug":
					o.Debug = true
				default:
					if v, ok := strings.CutPrefix(opt, "fsname="); ok {
						o.FsName = v
					} else {
						o.Extra = append(o.Extra, opt)
					}
				}
			}
		case a == "-d" || a == "--debug":
			o.Debug = true
		case strings.HasPrefix(a, "-") && a != "-":
			return fmt.Errorf("unknown flag %s: %w", a, errUsage)
		default:
			pos = append(pos, a)
		}
	}
	if len(pos) != 2 {
		return errUsage
	}
	image, dir := pos[0], pos[1]
	if o.FsName == "" {
		o.FsName = image
	}
	v, err := ext4io.OpenImage(image, ext4io.Options{Writable: !o.ReadOnly})
	if err != nil {
		return err
	}
	s, err := fusefs.Mount(v, dir, o)
	if err != nil {
		v.Close()
		return err
	}
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		for range sig {
			// Unmount fails while files are in use (EBUSY); the next
			// signal tries again.
			if err := s.Unmount(); err != nil {
				fmt.Fprintf(os.Stderr, "ext4io mount: unmount %s: %v\n", dir, err)
			}
		}
	}()
	s.Wait()
	signal.Stop(sig)
	return v.Close()
}
