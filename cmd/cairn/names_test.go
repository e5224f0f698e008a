package main

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/cairnhq/cairn/pkg/assets"
)

// Every connection the CLI makes takes its replies under _INBOX.cairn.<name>: no hosted
// pipeline may be named so (a pipeline called cli took 57 of the CLI's replies). The names
// are read from the commands' source, so a new one is checked too.
func TestConnectionNamesReserved(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	call := regexp.MustCompile(`\b(?:connect|service\.Connect)\((?:c, )?"([a-z0-9_-]+)"\)`)
	seen := map[string]bool{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range call.FindAllSubmatch(b, -1) {
			seen[string(m[1])] = true
		}
	}
	if !seen["cli"] || !seen["init"] {
		t.Fatalf("connection names found %v: the pattern no longer finds the commands' connections", seen)
	}
	for name := range seen {
		if _, err := assets.SpaceOf(name); !errors.Is(err, assets.ErrReservedName) {
			t.Errorf("connection %q (replies under _INBOX.cairn.%s) is not a reserved pipeline name (%v): add it to pkg/assets' reservedNames", name, name, err)
		}
	}
}
