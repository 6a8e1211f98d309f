// Package mig is Slicer's pure MIG core: GPU model tables, profiles, placements, occupancy,
// the placement policy, preemption victims, the defragmentation planner, the lower bound and
// the exact optimum. It does no I/O, reads no clock, has no mutable globals, iterates
// deterministically and imports the standard library only (a depguard rule in .golangci.yml).
// The scheduler plugin, the node agent, the DRA frontend and slicer-sim all call it; what only
// the simulator uses (baseline policies, static batches, two-move chains) is in migsim.
//
// Models and profiles (models.go is the only place geometry is written down):
//
//	Models() []Model; ParseModel(name) (Model, error)
//	ModelForDevice(pciDeviceID uint32, productName string, memoryMiB uint64) (Model, error)
//	                                           // PCI id first, exact name second, memory within 5 %
//	Profile.SupportedBy(driverVersion) bool    // the driver's branch is at least Profile.MinDriver
//	Model.Profiles() []Profile; Model.Profile(name) (Profile, error)   // either spelling
//	ParseProfileName(name) (string, error)   // "1g.10gb.me" or "1g.10gb+me" -> "1g.10gb+me"
//	LegalProfileName(name) string            // "1g.10gb+me" -> "1g.10gb.me"
//	ResourceName(name) string; Profile.ResourceName(); ProfileNameFromResource(res)
//	KnownProfileNames() []string; ModelsSupporting(name) []Model
//	ResourcePrefix = "slicer.dev/mig-"; NVIDIAResourcePrefix = "nvidia.com/mig-"
//	Profile.MemoryBytes() uint64              // nominal: the GB in the name × 10^9
//	Profile.StepDown() (Profile, bool)         // the next smaller profile in memory (right-sizing)
//	Profile.SmallestFit(peakBytes) (Profile, bool)
//
// Kubernetes resource names cannot hold '+': the legal spelling of an option in resource names
// and CRD enums has '.' for '+' (slicer.dev/mig-1g.10gb.me, 1g.24gb.me.all; "-me" stays).
// Profile.Name keeps the NVIDIA spelling.
//
// Occupancy: GPUState is a 4-byte comparable value (model + index into the model's table of
// the legal states: 2,319 on 8-slice GPUs, 76 on A30). Every question is a table lookup:
//
//	EmptyGPU(m); NewGPUState(m, []Instance) (GPUState, error)   // validates, never panics
//	Occupancy(m, []Occupant, misfits) (GPUState, error)          // instances + claims, each slot once
//	s.Take(p, pl) / s.Release(p, pl) (GPUState, error); s.CanTake(p, pl); s.Has(p, pl)
//	s.Fits(p) bool; s.Candidates(p) []Placement; s.Count(p); s.WhyNot(p) string; s.Obstacle(p)
//	Slot{GPU, Profile, Placement}: a slice's identity; Slot.Overlaps, Slot.DeviceID
//
// Placement policy: a Node is a list of GPUs (state + usable). A Request (NewRequest, built once
// per pod) holds up to MaxRequestSlices slices, placed largest first on one node.
//
//	Score(node, req) (int64, bool)         // [0, MaxNodeScore], feasibility; 0 allocations
//	Place(node, req) ([]Assignment, error) // same code path as Score
//	Explain(node, req) string              // why not, for the scheduler's failure message
//	Apply(node, assignments) error         // take them on a snapshot
//
// Each slice goes to the (GPU, start) that loses the least future placeability V(state) =
// Σ_profiles weight × how many more instances of the profile still fit (weight = compute ×
// memory slices), ties broken by the largest free aligned block and the highest start. This
// prefers GPUs already in use and keeps 4g/7g starts free.
//
// Whole GPUs (docs/design/whole-gpus.md): GPU.Mode (ModeMIG, the zero value; ModeWhole;
// ModeSwitching), GPU.Switchable, GPU.InUse; Node.Topology (NewTopology(n, links), per-pair
// Link ranks: LinkOther < LinkSameNUMA < LinkSamePCIeSwitch < LinkNVLink).
//
//	gpu.SliceUse(), gpu.WholeUse() Use        // UseNo, UseReady, UseAfterSwitch
//	ScoreWhole(node, n) (int64, bool)         // n whole GPUs: Filter and Score, 0 allocations
//	PlaceWhole(node, n) (WholeChoice, error)  // the GPUs and which of them switch off MIG
//	ExplainWhole(node, n) string; ApplyWhole(node, choice) error
//
// The choice prefers the fewest switches, then the best-connected set (weakest link, then sum
// of links), then the most links left among the free GPUs. Slices go to MIG GPUs only; an empty
// switchable whole GPU is switched to MIG (Apply records it) only when no MIG GPU takes the
// slice, and such a node scores 0.
//
// DRA devices: Devices(node, order) lists every (GPU, profile, placement) in NameOrder or
// PreferredOrder (the policy's order); FirstFitting(node, devices, profile) is the stock
// allocator's pick.
//
// Preemption: ChooseVictims(m, holders, p, preemptor) and PlanPreemption(gpus, req, preemptor),
// the fewest and lowest-priority victims that open a placement.
//
// Bounds: LowerBound(m, items) (at least docs/design/geometry.md's formula), Optimum(m, items)
// (exact, up to MaxExactRequests slices), PackExact(m, items, gpus, work) (does the batch fit on
// that many GPUs, no limit on the slices).
//
// Defragmentation (docs/design/defragmentation.md):
//
//	PlanDefrag(nodes, req, movable, DefragOptions) DefragResult
//	    // the fewest moves of movable slices, each to a placement free now, that open a legal
//	    // placement for a pending single-slice request; DefragOptions: MaxMoves, MaxRemovalSets,
//	    // DeepWork (the bound on plans of more than ShallowDefragMoves), Destinations and
//	    // DestinationClass (where a moved slice may go), RepackGPUs
//	PlanRepack(nodes, req, movable, RepackOptions) DefragResult
//	    // re-place the slices of a few GPUs with the request (PlanDefrag asks it after two moves)
//	PodMove{ControllerKind, AnnotatedUnmovable, Deleting, Slices}.Check() Immovable
//	    // Evict mode's movability rules that read the pod alone (the scheduler and slicer-sim)
//	EvictionCap{Max, Window}.Admit(past, now, n) ([]time.Time, bool)
//	    // spec.defragmentation's cap of maxEvictions per windowSeconds
//	SliceIndex[T]: Reset(nodes), Add(node, gpu, start, v), At(SliceAt) (T, bool)
//	    // what a MovableFunc found at each slice, for the same call's Destinations and
//	    // DestinationClass; kept between calls, it allocates nothing once grown
package mig
