package kvcheckpoint

import "testing"

// Every schema before the current one has its upgrade to the next.
func TestUpgradesCoverEverySchema(t *testing.T) {
	for v := 1; v < Schema; v++ {
		if upgrades[v] == nil {
			t.Errorf("no upgrade from schema %d to %d", v, v+1)
		}
	}
}
