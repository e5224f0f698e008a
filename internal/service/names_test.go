package service

import (
	"errors"
	"strings"
	"testing"

	"github.com/cairnhq/cairn/pkg/assets"
)

// Every service of the night takes its replies under _INBOX.cairn.<service> and connects as
// the NATS user <service>: no hosted pipeline may be named so (its replies would be the
// service's), nor after the first word of a hyphenated one (its service <rest> would be the
// NATS user <service>). assets keeps the one list of such names; this keeps it complete.
func TestServiceNamesReserved(t *testing.T) {
	for _, s := range Services() {
		word, _, _ := strings.Cut(s, "-")
		if _, err := assets.SpaceOf(word); !errors.Is(err, assets.ErrReservedName) {
			t.Errorf("service %s: pipeline name %q is not reserved (%v): add it to pkg/assets' reservedNames", s, word, err)
		}
	}
}
