package recon

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestListDocuments(t *testing.T) {
	t.Parallel()
	inbox := t.TempDir()
	dir := NightDir(inbox, "ldh", "2026-10-13")
	if err := os.MkdirAll(filepath.Join(dir, "sub.txt"), 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"INV-2.txt":     "two",
		"INV-1.txt":     "one",
		".INV-3.txt":    "hidden temp file",
		"INV-4.txt.tmp": "not a document",
		"notes.md":      "not a document",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	docs, err := ListDocuments(inbox, "ldh", "2026-10-13")
	if err != nil {
		t.Fatal(err)
	}
	want := []Document{
		{InvoiceNo: "INV-1", Path: filepath.Join(dir, "INV-1.txt"), Digest: DocumentDigest([]byte("one")), Size: 3},
		{InvoiceNo: "INV-2", Path: filepath.Join(dir, "INV-2.txt"), Digest: DocumentDigest([]byte("two")), Size: 3},
	}
	if !slices.Equal(docs, want) {
		t.Fatalf("got %+v\nwant %+v", docs, want)
	}
	if docs[0].Digest != "sha256:7692c3ad3540bb803c020b3aee66cd8887123234ea0c6e7143c0add73ff431ed" {
		t.Fatalf("digest of %q = %s", "one", docs[0].Digest)
	}

	if err := os.WriteFile(filepath.Join(dir, "INV 5.txt"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ListDocuments(inbox, "ldh", "2026-10-13"); !errors.Is(err, ErrInvalidID) {
		t.Fatalf("a document named %q: got %v, want ErrInvalidID", "INV 5.txt", err)
	}
	if _, err := ListDocuments(inbox, "ldh", "2026-10-14"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing night: got %v, want fs.ErrNotExist", err)
	}
	if _, err := ListDocuments(inbox, "../ldh", "2026-10-13"); !errors.Is(err, ErrInvalidID) {
		t.Fatalf("warehouse ../ldh: got %v, want ErrInvalidID", err)
	}
	if _, err := ListDocuments(inbox, "ldh", "2026-13-01"); !errors.Is(err, ErrInvalidID) {
		t.Fatalf("date 2026-13-01: got %v, want ErrInvalidID", err)
	}
}

func TestSourceFingerprint(t *testing.T) {
	t.Parallel()
	a := Document{InvoiceNo: "INV-1", Digest: DocumentDigest([]byte("one"))}
	b := Document{InvoiceNo: "INV-2", Digest: DocumentDigest([]byte("two"))}
	fp := SourceFingerprint([]Document{a, b})
	if got := SourceFingerprint([]Document{b, a}); got != fp {
		t.Fatal("fingerprint depends on the order of the list")
	}
	// Paths and sizes are where a document lies, not what it says.
	moved := a
	moved.Path, moved.Size = "/elsewhere/INV-1.txt", 99
	if got := SourceFingerprint([]Document{moved, b}); got != fp {
		t.Fatal("fingerprint depends on the path")
	}
	changed := b
	changed.Digest = DocumentDigest([]byte("two!"))
	for name, docs := range map[string][]Document{
		"changed": {a, changed},
		"removed": {a},
		"added":   {a, b, {InvoiceNo: "INV-3", Digest: DocumentDigest(nil)}},
	} {
		if SourceFingerprint(docs) == fp {
			t.Errorf("%s document: fingerprint unchanged", name)
		}
	}
	if want := DocumentDigest([]byte("INV-1 " + a.Digest + "\nINV-2 " + b.Digest + "\n")); fp != want {
		t.Fatalf("fingerprint %s, want sha256 over the lines %s", fp, want)
	}
}
