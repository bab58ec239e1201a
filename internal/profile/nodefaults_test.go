package profile

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// notProfileDefaults are the packages whose Default* names are not defaults
// of the profile, each with the reason. Keep it short: a tunable of the
// controller belongs in the profile, its default in defaults.go.
var notProfileDefaults = map[string]string{
	"webhook":  "the authn webhook is its own program with its own config file; its defaults are applied once, in webhook/config.go",
	"jwt":      "a library (the key cache the webhook and the drop-box share); each caller's own configuration sets what it tunes",
	"cli":      "command-line flag defaults of crucible's subcommands, not keys of the profile",
	"devstack": "options of the local development stack (crucible dev), which writes the profile its controller reads",
	"workpod":  "the kind a submission that names none gets: part of the API's request format, not of the profile",
}

// No package but profile declares a default: every const or var named
// Default*/default* in the non-test files under internal/ is in profile, or
// in a package notProfileDefaults names with its reason. A default copied
// into a consumer (issue 21) fails here with its file and line.
func TestNoDefaultsOutsideProfile(t *testing.T) {
	root := ".."
	fset := token.NewFileSet()
	var found []string
	seen := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		top, _, _ := strings.Cut(filepath.ToSlash(rel), "/")
		seen[top] = true
		if top == "profile" {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, name := range defaultNames(f) {
			if _, ok := notProfileDefaults[top]; ok {
				continue
			}
			pos := fset.Position(name.Pos())
			found = append(found, fmt.Sprintf("%s:%d: %s", pos.Filename, pos.Line, name.Name))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !seen["profile"] || !seen["ingest"] {
		t.Fatalf("walked %v from %s, not internal/: this test checks nothing", slices.Sorted(maps.Keys(seen)), root)
	}
	for pkg := range notProfileDefaults {
		if !seen[pkg] {
			t.Errorf("notProfileDefaults names %s, which is no package under internal/ any more; remove it", pkg)
		}
	}
	slices.Sort(found)
	for _, f := range found {
		t.Errorf("%s: a default outside package profile; make it a profile key with its default in profile/defaults.go (or, if it is no profile default, give its package a reason in notProfileDefaults)", f)
	}
}

// defaultNames are the consts and vars of f, at any level, whose names
// start with Default or default.
func defaultNames(f *ast.File) []*ast.Ident {
	var out []*ast.Ident
	ast.Inspect(f, func(n ast.Node) bool {
		d, ok := n.(*ast.GenDecl)
		if !ok || (d.Tok != token.CONST && d.Tok != token.VAR) {
			return true
		}
		for _, spec := range d.Specs {
			for _, name := range spec.(*ast.ValueSpec).Names {
				if strings.HasPrefix(name.Name, "Default") || strings.HasPrefix(name.Name, "default") {
					out = append(out, name)
				}
			}
		}
		return true
	})
	return out
}
