package publicapi

import (
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestEveryPublicPackageHasAnExample(t *testing.T) {
	t.Parallel()
	found, err := lacking(filepath.Join("..", "..", "pkg"))
	if err != nil {
		t.Fatal(err)
	}
	if len(found.packages) == 0 {
		t.Fatal("no packages found under ../../pkg")
	}
	for _, p := range found.packages {
		if why := found.lacks[p]; len(why) > 0 {
			t.Errorf("pkg/%s: %s", p, strings.Join(why, "; "))
		}
	}
}

// TestLackingFindsWhatIsMissing runs the check on a tree made for it, one package for each
// way to fall short.
func TestLackingFindsWhatIsMissing(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		path := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const docGo = "// Package %s does one thing.\npackage %s\n"
	pkgDoc := func(name string) string { return strings.ReplaceAll(docGo, "%s", name) }
	const runnable = "package %s_test\n\nimport \"fmt\"\n\nfunc Example() {\n\tfmt.Println(1)\n\t// Output: 1\n}\n"
	example := func(name string) string { return strings.ReplaceAll(runnable, "%s", name) }

	write("good/doc.go", pkgDoc("good"))
	write("good/example_test.go", example("good"))
	write("quiet/doc.go", pkgDoc("quiet"))
	write("quiet/example_test.go", "package quiet_test\n\nfunc ExampleF() {\n\t// Output:\n}\n")
	write("nodoc/nodoc.go", "package nodoc\n")
	write("nodoc/example_test.go", example("nodoc"))
	write("nocomment/doc.go", "package nocomment\n")
	write("nocomment/example_test.go", example("nocomment"))
	write("compiled/doc.go", pkgDoc("compiled"))
	write("compiled/example_test.go", "package compiled_test\n\nimport \"fmt\"\n\nfunc Example() {\n\tfmt.Println(1)\n}\n")
	write("notests/doc.go", pkgDoc("notests"))
	write("nested/inner/doc.go", pkgDoc("inner"))
	write("nested/inner/example_test.go", example("inner"))
	write("good/testdata/x.go", "package broken {\n") // never a package
	write("onlytests/x_test.go", "package onlytests\n")

	found, err := lacking(root)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"compiled", "good", "nested/inner", "nocomment", "nodoc", "notests", "quiet"}
	if !slices.Equal(found.packages, want) {
		t.Errorf("packages %v, want %v", found.packages, want)
	}
	for p, ok := range map[string]bool{"good": true, "quiet": true, "nested/inner": true, "nodoc": false, "nocomment": false, "compiled": false, "notests": false} {
		if got := len(found.lacks[p]) == 0; got != ok {
			t.Errorf("%s: lacks %q, want complete %t", p, found.lacks[p], ok)
		}
	}
}

// survey is what lacking found: every package, by its path under the root, in order, and
// what each lacks (no entry: nothing).
type survey struct {
	packages []string
	lacks    map[string][]string
}

// lacking looks at every package under root (a folder with a .go file other than a test;
// testdata and folders beginning with . or _ are not packages) and says what each lacks: a
// doc.go with its package comment, and a runnable example.
func lacking(root string) (survey, error) {
	s := survey{lacks: map[string][]string{}}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if path != root && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") || strings.HasPrefix(d.Name(), "_")) {
			return filepath.SkipDir
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		why, isPackage, err := checkPackage(path)
		if err != nil {
			return err
		}
		if isPackage && rel != "." {
			rel = filepath.ToSlash(rel)
			s.packages = append(s.packages, rel)
			if len(why) > 0 {
				s.lacks[rel] = why
			}
		}
		return nil
	})
	slices.Sort(s.packages)
	return s, err
}

// checkPackage says what the package in dir lacks, and whether dir holds a package at all.
func checkPackage(dir string) (why []string, isPackage bool, err error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, false, err
	}
	fset := token.NewFileSet()
	var tests []*ast.File
	hasDoc := false
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") {
			continue
		}
		if !strings.HasSuffix(name, "_test.go") {
			isPackage = true
			if name == "doc.go" {
				hasDoc = true
				reason, err := checkDoc(fset, filepath.Join(dir, name))
				if err != nil {
					return nil, false, err
				}
				if reason != "" {
					why = append(why, reason)
				}
			}
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.ParseComments)
		if err != nil {
			return nil, false, err
		}
		tests = append(tests, f)
	}
	if !isPackage {
		return nil, false, nil
	}
	if !hasDoc {
		why = append(why, "no doc.go")
	}
	if !slices.ContainsFunc(doc.Examples(tests...), func(ex *doc.Example) bool { return ex.Output != "" || ex.EmptyOutput }) {
		why = append(why, "no runnable example (a func Example… in a _test.go file, ending with an // Output: comment)")
	}
	return why, true, nil
}

// checkDoc says what is wrong with the doc.go at path: "" when its package comment begins
// "Package <name> ".
func checkDoc(fset *token.FileSet, path string) (string, error) {
	f, err := parser.ParseFile(fset, path, nil, parser.PackageClauseOnly|parser.ParseComments)
	if err != nil {
		return "", err
	}
	if f.Doc == nil || !strings.HasPrefix(f.Doc.Text(), "Package "+f.Name.Name+" ") {
		return "doc.go has no package comment beginning \"Package " + f.Name.Name + " \"", nil
	}
	return "", nil
}
