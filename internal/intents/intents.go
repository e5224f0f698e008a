// Package intents is what the runner and the supervisor share to count a step's open saga
// intents (effects.intents_open) when a failure or a handover records them, and what the
// compensator reads saga records with: whose records are trusted, and how long the count
// may take.
package intents

import (
	"time"

	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/saga"
)

// CountTimeout bounds the read of a step's saga records that counts its open intents for a
// failure or a handover (the runner's, and the supervisor's for a step whose attempts died):
// the failure's own write must not wait on it.
const CountTimeout = 3 * time.Second

// Trust is what saga records are checked against by a service whose store is store: its
// ring, each step's records written by the step's service; nil when the store checks
// nothing.
func Trust(store *kc.Store) *saga.Trust {
	if ring := store.Ring(); ring != nil {
		return &saga.Trust{Ring: ring}
	}
	return nil
}
