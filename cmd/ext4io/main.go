// Command ext4io inspects and changes ext4 images with the ext4io library.
//
//	ext4io info IMAGE               superblock summary
//	ext4io ls IMAGE [PATH]          list a directory
//	ext4io cat IMAGE PATH           file contents to stdout
//	ext4io stat IMAGE PATH          inode metadata
//	ext4io fiemap IMAGE PATH        one line per extent, like filefrag -v
//	ext4io mkfs [-b BLOCKSIZE] [-O FEATURES] [-L LABEL] [-d DIR] IMAGE SIZE
//	ext4io bench, put, get, mkdir, rm, mv, journal, recover: see usage
//	ext4io create IMAGE PATH        new empty file
//	ext4io write IMAGE PATH [--offset N]   stdin into the file
//	ext4io fallocate IMAGE PATH OFFSET LENGTH [--mode MODE]
//	ext4io truncate IMAGE PATH SIZE
//	ext4io getfattr IMAGE PATH [NAME]      extended attributes, like getfattr -d -m -
//	ext4io setfattr IMAGE PATH NAME VALUE  (or -x NAME to remove)
//
// On bad input it prints one line to stderr and exits with status 1
// (2 for usage errors).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

type command struct {
	usage string
	run   func(args []string, stdout io.Writer) error
}

var commands = map[string]command{
	"info":      {"info IMAGE", cmdInfo},
	"ls":        {"ls IMAGE [PATH]", cmdLs},
	"cat":       {"cat IMAGE PATH", cmdCat},
	"stat":      {"stat IMAGE PATH", cmdStat},
	"fiemap":    {"fiemap IMAGE PATH", cmdFiemap},
	"mkfs":      {"mkfs [-F] [-b BLOCKSIZE] [-O FEATURE,^FEATURE...] [-L LABEL] [-I INODESIZE] [-d DIR] IMAGE SIZE", cmdMkfs},
	"create":    {"create IMAGE PATH", cmdCreate},
	"write":     {"write IMAGE PATH [--offset N] [--direct]   (stdin into the file)", cmdWrite},
	"fallocate": {"fallocate IMAGE PATH OFFSET LENGTH [--mode allocate|keep-size|punch-hole|zero-range|write-zeroes|collapse-range|insert-range]", cmdFallocate},
	"truncate":  {"truncate IMAGE PATH SIZE", cmdTruncate},
	"getfattr":  {"getfattr [-h] IMAGE PATH [NAME]", cmdGetfattr},
	"setfattr":  {"setfattr [-h] IMAGE PATH NAME VALUE | setfattr [-h] IMAGE PATH -x NAME", cmdSetfattr},
	"mount":     {mountUsage, cmdMount},
}

// errUsage marks errors that should print the usage line.
var errUsage = errors.New("usage")

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "help" || args[0] == "--help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "ext4io: unknown command %q\n", args[0])
		usage(stderr)
		return 2
	}
	if err := c.run(args[1:], stdout); err != nil {
		if errors.Is(err, errUsage) {
			fmt.Fprintf(stderr, "usage: ext4io %s\n", c.usage)
			return 2
		}
		fmt.Fprintf(stderr, "ext4io %s: %s\n", args[0], oneLine(err))
		return 1
	}
	return 0
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: ext4io COMMAND [ARGS]")
	names := make([]string, 0, len(commands))
	for name := range commands {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(w, "  ext4io %s\n", commands[name].usage)
	}
}

func oneLine(err error) string {
	return strings.ReplaceAll(err.Error(), "\n", " ")
}

// newFlags returns a FlagSet that reports errors instead of exiting.
func newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}
