package webhook

import "github.com/slicer-operator/slicer/test/builder"

// makePod starts the test pod every webhook test mutates: team-a/p.
func makePod() *builder.PodBuilder { return builder.Pod("team-a", "p") }

var (
	limits   = builder.Limits
	requests = builder.Requests
	both     = builder.Both
)
