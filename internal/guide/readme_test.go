package guide

import (
	"os"
	"path/filepath"
	"testing"
)

// readmeLimit is the README's size at most (issue 34): what Cairn is, the two commands, the
// enrichment table, the three things a job is, running it, the documentation and the layout.
// The rest is in docs/.
const readmeLimit = 15 * 1024

func TestReadmeSize(t *testing.T) {
	t.Parallel()
	fi, err := os.Stat(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() > readmeLimit {
		t.Errorf("README.md is %d bytes, over %d: move what a reader does not need first to docs/ (docs/jobs.md, docs/operator.md, ...)", fi.Size(), readmeLimit)
	}
}
