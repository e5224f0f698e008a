package pipeline_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// nightWords are the reference night's words, which the framework's packages (pkg/) must
// not know: a pipeline's domain lives in the pipeline, not in Cairn.
var nightWords = regexp.MustCompile(`(?i)warehouse|supplier|stock|ledger|invoice`)

// nightWordsLeft is what pkg/ still says of the night, per file: the name records before
// schema 5 gave the run's snapshot, which kvcheckpoint reads to upgrade them, and events'
// one example of a start. A file may only lose words: the test fails when one gains a word or a new file
// has any, and when a file lost some, until its count here is lowered.
var nightWordsLeft = map[string]int{
	"events/doc.go":           1,
	"kvcheckpoint/upgrade.go": 1,
}

// The framework's packages know nothing of the night beyond nightWordsLeft.
func TestPkgKnowsNothingOfTheNight(t *testing.T) {
	root := ".."
	found := map[string]int{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if n := len(nightWords.FindAll(b, -1)); n > 0 {
			rel, _ := filepath.Rel(root, path)
			found[filepath.ToSlash(rel)] = n
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for f, n := range found {
		if left := nightWordsLeft[f]; n > left {
			t.Errorf("pkg/%s says %d of the night's words (%s), %d allowed: the night's domain belongs to the pipeline, not to pkg/", f, n, nightWords, left)
		}
	}
	for f, left := range nightWordsLeft {
		if n := found[f]; n < left {
			t.Errorf("pkg/%s says %d of the night's words, fewer than the %d left: lower its count in nightWordsLeft", f, n, left)
		}
	}
}
