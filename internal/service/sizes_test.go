package service

import (
	"strings"
	"testing"

	"github.com/cairnhq/cairn/internal/night"
)

// CAIRN_MAX_DOCUMENT_BYTES is validated at start, naming the variable.
func TestLoadValidatesTheDocumentLimit(t *testing.T) {
	for _, v := range []string{"0", "-1", "1023", "1073741825", "lots"} {
		t.Run(v, func(t *testing.T) {
			t.Setenv("CAIRN_MAX_DOCUMENT_BYTES", v)
			if _, err := Load(); err == nil || !strings.Contains(err.Error(), "MAX_DOCUMENT_BYTES") {
				t.Fatalf("Load: %v, want an error naming CAIRN_MAX_DOCUMENT_BYTES", err)
			}
		})
	}
	c, err := Load()
	if err != nil || c.MaxDocumentBytes != night.DefaultMaxDocument {
		t.Fatalf("Load with the default: %d, %v; want night.DefaultMaxDocument", c.MaxDocumentBytes, err)
	}
}
