package main

import (
	"errors"
	"fmt"
	"go/ast"
	"go/build"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// fileGraph is one package's non-test files (base names, sorted) and the
// references between them: refs[a][b] counts the identifiers used in a
// that resolve to a top-level declaration (func, method, type, var,
// const) of b, a != b.
type fileGraph struct {
	files []string
	refs  map[string]map[string]int
}

// loadFiles type-checks the package in dir (its files for this GOOS and
// GOARCH, tests left out) and counts its files' references to each
// other.
func loadFiles(dir string) (*fileGraph, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	var files []*ast.File
	g := &fileGraph{refs: map[string]map[string]int{}}
	for _, e := range ents {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		if ok, err := build.Default.MatchFile(dir, name); err != nil || !ok {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
		g.files = append(g.files, name)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%s: no Go files", dir)
	}
	var errs []error
	conf := types.Config{
		Importer: importer.ForCompiler(fset, "source", nil),
		Error:    func(err error) { errs = append(errs, err) },
	}
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}}
	pkg, _ := conf.Check(files[0].Name.Name, fset, files, info)
	if len(errs) > 0 {
		// A reference the checker could not resolve would be missing from
		// the counts: refuse rather than draw a wrong picture.
		return nil, fmt.Errorf("type-checking %s: %w", dir, errors.Join(errs[:min(len(errs), 5)]...))
	}
	for id, obj := range info.Uses {
		if obj.Pkg() != pkg || !topLevel(pkg, obj) {
			continue
		}
		from := filepath.Base(fset.Position(id.Pos()).Filename)
		to := filepath.Base(fset.Position(obj.Pos()).Filename)
		if from == to {
			continue
		}
		if g.refs[from] == nil {
			g.refs[from] = map[string]int{}
		}
		g.refs[from][to]++
	}
	slices.Sort(g.files)
	return g, nil
}

// topLevel reports whether obj, of pkg, is declared at package level: a
// func, type, var or const of the package scope, or a method (of a
// named type or of an interface type; struct fields are not counted).
func topLevel(pkg *types.Package, obj types.Object) bool {
	switch o := obj.(type) {
	case *types.Func:
		if sig, ok := o.Type().(*types.Signature); ok && sig.Recv() != nil {
			return true
		}
		return o.Parent() == pkg.Scope()
	case *types.TypeName, *types.Var, *types.Const:
		return obj.Parent() == pkg.Scope()
	}
	return false
}

// edge is one file's references to another.
type edge struct {
	from, to string
	refs     int
}

// edges returns every edge, sorted by from, then to.
func (g *fileGraph) edges() []edge {
	var es []edge
	for _, a := range g.files {
		for _, b := range g.files {
			if n := g.refs[a][b]; n > 0 {
				es = append(es, edge{a, b, n})
			}
		}
	}
	return es
}
