package manager

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestOptionsLeaseTimings(t *testing.T) {
	cases := map[string]struct {
		c    Config
		want []time.Duration
	}{
		"defaults": {c: Config{}, want: []time.Duration{DefaultLeaseDuration, DefaultRenewDeadline, DefaultRetryPeriod}},
		"set": {c: Config{LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: time.Second},
			want: []time.Duration{4 * time.Second, 3 * time.Second, time.Second}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			o := Options(tc.c)
			got := []time.Duration{*o.LeaseDuration, *o.RenewDeadline, *o.RetryPeriod}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("lease duration, renew deadline, retry period (-want +got):\n%s", diff)
			}
			if !o.LeaderElectionReleaseOnCancel {
				t.Error("a graceful stop must release the Lease")
			}
		})
	}
}
