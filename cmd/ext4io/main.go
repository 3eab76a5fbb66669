// Command ext4io inspects and changes ext4 images with the ext4io library.
//
//	ext4io info IMAGE                  superblock summary
//	ext4io ls [-l] [-i] IMAGE [PATH]   list a directory, like ls
//	ext4io cat IMAGE PATH              file contents to stdout
//	ext4io stat IMAGE PATH             inode metadata
//	ext4io fiemap IMAGE PATH           one line per extent, like filefrag -v
//	ext4io mkfs [-F] [-b BLOCKSIZE] [-O FEATURES] [-L LABEL] [-I INODESIZE] [-d DIR] IMAGE SIZE
//	ext4io put, get, mkdir, rm, mv     copy in and out, change the namespace
//	ext4io create, write, fallocate, truncate   change a file
//	ext4io getfattr, setfattr          extended attributes, like getfattr and setfattr
//	ext4io fstrim IMAGE                discard free space, like fstrim
//	ext4io mount [-o OPTIONS] IMAGE DIR  serve the image over FUSE
//	ext4io journal, recover, bench, torture
//
// "ext4io help COMMAND" (or "ext4io COMMAND --help") describes a command
// and its flags. Flags may come before, between or after the arguments;
// "--" ends them. On bad input ext4io prints one line to stderr and exits
// with status 1 (2 for usage errors).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// A command is one ext4io subcommand. Its run must parse its flags with
// newFlags and parseArgs before it does anything else: help runs it with
// --help to find its flags.
type command struct {
	usage string // synopsis after "ext4io "
	help  string // what it does, for "ext4io help COMMAND"
	run   func(args []string, stdout io.Writer) error
	// hFlag: -h is one of the command's flags (getfattr and setfattr,
	// as attr's: do not follow a symlink), help only when alone.
	hFlag bool
}

// commands is every subcommand; bench and torture add themselves in
// their files.
var commands = map[string]command{
	"info":   {usage: "info IMAGE", help: "Print a summary of the superblock.", run: cmdInfo},
	"ls":     {usage: "ls [-l] [-i] IMAGE [PATH]", help: "List the directory PATH (default /), or name PATH if it is not a directory.", run: cmdLs},
	"cat":    {usage: "cat IMAGE PATH", help: "Copy the file PATH to stdout.", run: cmdCat},
	"stat":   {usage: "stat IMAGE PATH", help: "Print the inode metadata of PATH (not following a final symlink).", run: cmdStat},
	"fiemap": {usage: "fiemap IMAGE PATH", help: "Print one line per extent of PATH, like filefrag -v.", run: cmdFiemap},
	"mkfs": {usage: "mkfs [-F] [-b BLOCKSIZE] [-O FEATURE,^FEATURE...] [-L LABEL] [-I INODESIZE] [-d DIR] IMAGE SIZE",
		help: "Create IMAGE of SIZE bytes (K, M, G, T or P suffixes) and format it as ext4.\n" +
			"An IMAGE that already holds ext4 is refused unless -F; a failed mkfs leaves no new file.\n" +
			"IMAGE may be an NBD URI: the first SIZE bytes of the export are formatted (docs/nbd.md).\n" +
			"-d DIR copies a host tree in as mkfs.ext4 -d: hard links, special files, holes, modes,\n" +
			"owners, nanosecond times, xattrs. DIR is walked and checked first: a tree ext4 cannot\n" +
			"hold is refused before IMAGE is touched (docs/cli.md).", run: cmdMkfs},
	"create": {usage: "create IMAGE PATH", help: "Create an empty file, mode 0666 less the umask, as touch does; an existing file is\n" +
		"truncated to 0 bytes, as os.Create and the shell's > do.", run: cmdCreate},
	"write": {usage: "write [--offset N] [--direct] IMAGE PATH",
		help: "Copy stdin into the file PATH at the offset, over what is there (the file is not truncated).\n" +
			"A missing PATH is created, mode 0666 less the umask.", run: cmdWrite},
	"fallocate": {usage: "fallocate [--mode MODE] IMAGE PATH OFFSET LENGTH",
		help: "Allocate, punch, zero, collapse or insert a range of the file, like fallocate(2).", run: cmdFallocate},
	"truncate": {usage: "truncate IMAGE PATH SIZE", help: "Set the file's size.", run: cmdTruncate},
	"put": {usage: "put IMAGE SRC DST",
		help: "Copy the host file or directory tree SRC into the image as DST (into DST if it is a directory),\n" +
			"as mkfs -d copies, validating SRC before writing.", run: cmdPut},
	"get": {usage: "get [-p] IMAGE SRC DST",
		help: "Copy the image's file or directory tree SRC to the host as DST (into DST if it is a directory).\n" +
			"Everything is created under DST's directory and nothing existing is followed or changed;\n" +
			"names that are not one path element, and directory cycles, are errors. Extended attributes\n" +
			"of the user namespace are copied; with -p every namespace (trusted, security, POSIX ACLs).\n" +
			"-p, like cp -p, also keeps setuid, setgid and sticky, ignores the umask, and as root keeps\n" +
			"owners and makes device nodes. Times, symlinks, hard links, fifos and sockets always (docs/cli.md).", run: cmdGet},
	"mkdir":   {usage: "mkdir IMAGE PATH", help: "Make a directory, mode 0777 less the umask, as mkdir does.", run: cmdMkdir},
	"rm":      {usage: "rm IMAGE PATH", help: "Remove a file, symlink or empty directory.", run: cmdRm},
	"mv":      {usage: "mv IMAGE OLD NEW", help: "Rename OLD to NEW.", run: cmdMv},
	"journal": {usage: "journal IMAGE", help: "Print the journal superblock and the transactions in the log.", run: cmdJournal},
	"recover": {usage: "recover IMAGE", help: "Replay a journal that needs recovery.", run: cmdRecover},
	"fstrim":  {usage: "fstrim [-v] [--offset N] [--length N] [--minimum N] IMAGE", help: "Discard the free space of IMAGE (fstrim; holes in an image file).", run: cmdFstrim},
	"getfattr": {usage: "getfattr [-h] IMAGE PATH [NAME]",
		help: "Print the extended attributes of PATH (or only NAME), like getfattr -d -m -: NAME=\"text\" when\n" +
			"the value is printable, else NAME=0s and base64.\n" +
			"-h reads a symlink's own attributes instead of its target's.", run: cmdGetfattr, hFlag: true},
	"setfattr": {usage: "setfattr [-h] IMAGE PATH NAME VALUE | setfattr [-h] IMAGE PATH -x NAME",
		help: "Set the extended attribute NAME of PATH to VALUE, or remove it with -x NAME, like setfattr.\n" +
			"VALUE is read as setfattr -v reads it: \"quoted text\", 0x followed by hex, 0s followed by base64,\n" +
			"or plain text. -h changes a symlink's own attributes instead of its target's.", run: cmdSetfattr, hFlag: true},
	"mount": {usage: "mount [-o ro,allow_other,default_permissions,direct_io,no_writeback_cache,cache_size=N,debug,...] [-d] [-f | --background] [--cpuprofile FILE] IMAGE DIR",
		help: "Serve IMAGE at DIR over FUSE until it is unmounted (fusermount3 -u, umount, SIGINT, SIGTERM or SIGHUP);\n" +
			"then write back, commit and mark the file system clean. In the foreground (-f, the default), or\n" +
			"with --background from a new process, returning once the file system is mounted.", run: cmdMount},
}

var (
	// errUsage marks errors that should print the usage line (status 2).
	errUsage = errors.New("usage")
	// errHelp is returned by parseArgs for -h, -help or --help.
	errHelp = errors.New("help requested")
	// errReported means the command already printed its errors to
	// stderr (status 1, nothing more to print).
	errReported = errors.New("errors reported")
)

// stderr is where commands report errors they go on after (run sets it).
var stderr io.Writer = os.Stderr

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, errw io.Writer) int {
	stderr = errw
	if len(args) == 0 {
		usage(errw)
		return 2
	}
	name, args := args[0], args[1:]
	if name == "help" || name == "-h" || name == "-help" || name == "--help" {
		if len(args) == 0 || args[0] == "help" {
			usage(stdout)
			return 0
		}
		name, args = args[0], []string{"--help"}
	}
	c, ok := commands[name]
	if !ok {
		fmt.Fprintf(errw, "ext4io: unknown command %q\n", name)
		fmt.Fprintln(errw, "Run 'ext4io help' for the list of commands.")
		return 2
	}
	if wantsHelp(args, c.hFlag) {
		printHelp(stdout, name, c)
		return 0
	}
	err := c.run(args, stdout)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errHelp):
		printHelp(stdout, name, c)
		return 0
	case errors.Is(err, errUsage):
		if msg := strings.TrimPrefix(strings.TrimPrefix(err.Error(), errUsage.Error()), ": "); msg != "" && msg != err.Error() {
			fmt.Fprintf(errw, "ext4io %s: %s\n", name, oneLine(errors.New(msg)))
		}
		fmt.Fprintf(errw, "usage: ext4io %s\n", c.usage)
		fmt.Fprintf(errw, "Run 'ext4io help %s' for details.\n", name)
		return 2
	case errors.Is(err, errReported):
		return 1
	}
	// The library's own "ext4io: " would repeat the line's prefix.
	fmt.Fprintf(errw, "ext4io %s: %s\n", name, strings.TrimPrefix(oneLine(err), "ext4io: "))
	return 1
}

// wantsHelp reports whether args ask for help before any "--"; with
// hFlag, -h does only when it is the only argument.
func wantsHelp(args []string, hFlag bool) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h":
			if !hFlag || len(args) == 1 {
				return true
			}
		case "-help", "--help":
			return true
		}
	}
	return false
}

// printHelp prints a command's usage, description and flags. It finds the
// flags by running the command with --help, which parses them and stops.
func printHelp(w io.Writer, name string, c command) {
	fmt.Fprintf(w, "usage: ext4io %s\n", c.usage)
	if c.help != "" {
		fmt.Fprintf(w, "\n%s\n", c.help)
	}
	delete(flagSets, name)
	c.run([]string{"--help"}, io.Discard)
	fs := flagSets[name]
	n := 0
	if fs != nil {
		fs.VisitAll(func(*flag.Flag) { n++ })
	}
	if n > 0 {
		fmt.Fprintln(w, "\nFlags:")
		fs.SetOutput(w)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
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
	fmt.Fprintln(w, "Run 'ext4io help COMMAND' for a command's description and flags.")
}

// oneLine is err's message on one line, printable (names in it may come
// from an image).
func oneLine(err error) string {
	return printable(strings.ReplaceAll(err.Error(), "\n", " "))
}

// printable returns s with each control character and byte of invalid
// UTF-8 written as a Go escape (\x1b, \n, \u0085, \xff): names from an
// image can then neither drive the terminal (escape sequences) nor fake
// lines of output.
func printable(s string) string {
	if !strings.ContainsFunc(s, func(r rune) bool { return r == utf8.RuneError || unicode.IsControl(r) }) {
		return s
	}
	var b strings.Builder
	for i, r := range s {
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(s[i:], string(utf8.RuneError)):
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case unicode.IsControl(r):
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// flagSets holds the FlagSet each command made last, for help.
var flagSets = map[string]*flag.FlagSet{}

// newFlags returns a FlagSet that reports errors instead of exiting.
func newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	flagSets[name] = fs
	return fs
}

// parseArgs parses fs's flags wherever they appear among args, as GNU
// tools do ("--" ends them; "-" alone is an argument; "-li" is "-l -i"
// for one-letter booleans), and returns the
// other arguments, between min and max of them (max < 0: no limit).
func parseArgs(fs *flag.FlagSet, args []string, min, max int) ([]string, error) {
	args = splitShort(fs, args)
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, errHelp
			}
			// A negative number where a size or offset goes reads as an
			// unknown flag ("-1"); say what it is.
			if n, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: -"); ok && n != "" && n[0] >= '0' && n[0] <= '9' {
				return nil, fmt.Errorf("%w: negative number -%s: sizes, offsets and lengths are 0 or more", errUsage, n)
			}
			return nil, fmt.Errorf("%w: %w", errUsage, err)
		}
		rest := fs.Args()
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			pos = append(pos, rest...)
			break
		}
		if len(rest) == 0 {
			break
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
	switch {
	case len(pos) < min:
		return nil, fmt.Errorf("%w: missing arguments", errUsage)
	case max >= 0 && len(pos) > max:
		return nil, fmt.Errorf("%w: unexpected argument %q", errUsage, pos[max])
	}
	return pos, nil
}

// splitShort expands grouped one-letter boolean flags ("-li" into "-l"
// "-i"), as getopt does, when every letter is such a flag of fs.
func splitShort(fs *flag.FlagSet, args []string) []string {
	var out []string
	for i, a := range args {
		if a == "--" {
			return append(out, args[i:]...)
		}
		if len(a) < 3 || a[0] != '-' || a[1] == '-' || !allShortBools(fs, a[1:]) {
			out = append(out, a)
			continue
		}
		for _, c := range a[1:] {
			out = append(out, "-"+string(c))
		}
	}
	return out
}

func allShortBools(fs *flag.FlagSet, letters string) bool {
	for _, c := range letters {
		f := fs.Lookup(string(c))
		if f == nil {
			return false
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); !ok || !b.IsBoolFlag() {
			return false
		}
	}
	return true
}

// noFlags parses args for a command without flags: exactly n arguments.
func noFlags(name string, args []string, n int) ([]string, error) {
	return parseArgs(newFlags(name), args, n, n)
}
