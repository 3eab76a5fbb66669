// Command graphs writes Graphviz DOT drawings of the module's structure:
//
//   - the package graph: the module's packages and their module-internal
//     imports (test files left out), one rank per layer, importers above
//     what they import, so every arrow points down;
//   - the root package's files: an edge A → B when a file A references a
//     top-level identifier (func, method, type, var, const) declared in
//     file B, labelled with the number of references. Files are placed in
//     layers, users above what they use; the edges that run back up the
//     layering are drawn red and counted.
//
// Usage, from the module root:
//
//	go run ./internal/graphs [-packages docs/graphs/packages-after.dot] [-files docs/graphs/root-files-after.dot] [-order layers.txt] [-layers used.txt]
//
// An empty path skips that drawing; -layers FILE writes the layering used
// in the -order format, a start for an intended one. The layering of the files is the one
// an -order file gives: one layer per line, top layer first, its files
// separated by spaces ('#' starts a comment). Every file of the package
// must be listed. Without -order the tool picks an order with few
// references running back up (a greedy feedback-arc-set heuristic) and
// layers it by longest path.
//
// The summary (files, edges, references, and those running back up) goes
// to standard output and into the DOT file's label. Rendering is a
// developer step: dot -Tsvg x.dot -o x.svg (docs/graphs/README.md).
//
// Only the standard library is used: go/parser for the package graph,
// go/types (with the source importer) to resolve the root's references.
package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	var (
		root     = flag.String("root", ".", "module root (the directory holding go.mod)")
		pkgOut   = flag.String("packages", "docs/graphs/packages-after.dot", "where to write the package graph (empty: skip)")
		filesOut = flag.String("files", "docs/graphs/root-files-after.dot", "where to write the root package's file graph (empty: skip)")
		order    = flag.String("order", "", "file listing the intended layering of the root's files, top layer first, one layer per line")
		layers   = flag.String("layers", "", "where to write the layering used, in the -order format (empty: skip)")
	)
	flag.Parse()
	if err := run(*root, *pkgOut, *filesOut, *order, *layers); err != nil {
		fmt.Fprintln(os.Stderr, "graphs:", err)
		os.Exit(1)
	}
}

func run(root, pkgOut, filesOut, orderPath, layersOut string) error {
	if pkgOut != "" {
		g, err := loadPackages(root)
		if err != nil {
			return err
		}
		if err := os.WriteFile(pkgOut, []byte(g.dot()), 0o644); err != nil {
			return err
		}
		fmt.Printf("%s: %d packages, %d imports\n", pkgOut, len(g.pkgs), g.nedges())
	}
	if filesOut != "" {
		g, err := loadFiles(root)
		if err != nil {
			return err
		}
		var lay layering
		if orderPath != "" {
			b, err := os.ReadFile(orderPath)
			if err != nil {
				return err
			}
			if lay, err = parseLayering(string(b), g.files); err != nil {
				return fmt.Errorf("%s: %w", orderPath, err)
			}
		} else {
			lay = autoLayering(g)
		}
		s := g.summarize(lay)
		if layersOut != "" {
			if err := os.WriteFile(layersOut, []byte(lay.String()), 0o644); err != nil {
				return err
			}
		}
		if err := os.WriteFile(filesOut, []byte(g.dot(lay, s)), 0o644); err != nil {
			return err
		}
		fmt.Printf("%s: %s\n", filesOut, s)
		for _, e := range s.worstUp {
			fmt.Printf("  up: %s -> %s (%d)\n", e.from, e.to, e.refs)
		}
	}
	return nil
}
