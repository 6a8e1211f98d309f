// Package nvml is the agent's narrow view of NVML: the few calls that discover
// GPUs and create or destroy MIG instances. Two backends implement it: real
// (go-nvml, cgo + dlopen of libnvidia-ml) and emulated (in-memory GPUs whose
// geometry comes from internal/mig). Errors carry NVML-like return codes.
package nvml

import (
	"errors"
	"fmt"
	"time"
)

// Return is an NVML return code. The values are NVML's nvmlReturn_t values.
type Return int

// The return codes the agent distinguishes (values as in nvml.h).
const (
	Success                   Return = 0
	ErrorUninitialized        Return = 1
	ErrorInvalidArgument      Return = 2
	ErrorNotSupported         Return = 3
	ErrorNoPermission         Return = 4
	ErrorNotFound             Return = 6
	ErrorInsufficientResource Return = 23
	ErrorDriverNotLoaded      Return = 9
	ErrorTimeout              Return = 10
	ErrorLibraryNotFound      Return = 12
	ErrorGPUIsLost            Return = 15
	ErrorResetRequired        Return = 16
	ErrorInUse                Return = 19
	ErrorUnknown              Return = 999
)

var returnNames = map[Return]string{
	Success:                   "SUCCESS",
	ErrorUninitialized:        "ERROR_UNINITIALIZED",
	ErrorInvalidArgument:      "ERROR_INVALID_ARGUMENT",
	ErrorNotSupported:         "ERROR_NOT_SUPPORTED",
	ErrorNoPermission:         "ERROR_NO_PERMISSION",
	ErrorNotFound:             "ERROR_NOT_FOUND",
	ErrorInsufficientResource: "ERROR_INSUFFICIENT_RESOURCES",
	ErrorDriverNotLoaded:      "ERROR_DRIVER_NOT_LOADED",
	ErrorTimeout:              "ERROR_TIMEOUT",
	ErrorLibraryNotFound:      "ERROR_LIBRARY_NOT_FOUND",
	ErrorGPUIsLost:            "ERROR_GPU_IS_LOST",
	ErrorResetRequired:        "ERROR_RESET_REQUIRED",
	ErrorInUse:                "ERROR_IN_USE",
	ErrorUnknown:              "ERROR_UNKNOWN",
}

// String is NVML's name of the code without the NVML_ prefix, e.g. "ERROR_IN_USE".
// It is also the (bounded) value of the agent's `return` metric label; codes the
// agent does not know are reported as ERROR_UNKNOWN.
func (r Return) String() string {
	if n, ok := returnNames[r]; ok {
		return n
	}
	return returnNames[ErrorUnknown]
}

// Error is a failed NVML call.
type Error struct {
	// Op names the call, e.g. "CreateGpuInstanceWithPlacement".
	Op     string
	Return Return
	// Detail is an optional human explanation (the emulated backend says why).
	Detail string
}

func (e *Error) Error() string {
	if e.Detail != "" {
		return fmt.Sprintf("nvml %s: %s: %s", e.Op, e.Return, e.Detail)
	}
	return fmt.Sprintf("nvml %s: %s", e.Op, e.Return)
}

// NewError returns an *Error for a non-success code, nil for Success.
func NewError(op string, r Return, detail string) error {
	if r == Success {
		return nil
	}
	return &Error{Op: op, Return: r, Detail: detail}
}

// ReturnOf extracts the return code of err: Success for nil, ErrorUnknown for
// an error that does not wrap an *Error.
func ReturnOf(err error) Return {
	if err == nil {
		return Success
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Return
	}
	return ErrorUnknown
}

// IsInUse reports whether err is NVML's ERROR_IN_USE.
func IsInUse(err error) bool { return ReturnOf(err) == ErrorInUse }

// IsNotFound reports whether err is NVML's ERROR_NOT_FOUND.
func IsNotFound(err error) bool { return ReturnOf(err) == ErrorNotFound }

// IsTimeout reports whether err is NVML's ERROR_TIMEOUT (an event wait that saw no event).
func IsTimeout(err error) bool { return ReturnOf(err) == ErrorTimeout }

// IsInsufficientResources reports whether err is NVML's ERROR_INSUFFICIENT_RESOURCES.
func IsInsufficientResources(err error) bool { return ReturnOf(err) == ErrorInsufficientResource }

// IsDriverUnavailable reports whether err means NVML cannot be used at all
// (library not found, driver not loaded, uninitialized).
func IsDriverUnavailable(err error) bool {
	switch ReturnOf(err) {
	case ErrorLibraryNotFound, ErrorDriverNotLoaded, ErrorUninitialized:
		return true
	}
	return false
}

// MIGMode is a device's MIG mode.
type MIGMode int

// MIG modes (NVML_DEVICE_MIG_DISABLE / _ENABLE).
const (
	MIGDisabled MIGMode = 0
	MIGEnabled  MIGMode = 1
)

// String is nvidia-smi's word for the mode ("Enabled", "Disabled").
func (m MIGMode) String() string {
	switch m {
	case MIGEnabled:
		return "Enabled"
	case MIGDisabled:
		return "Disabled"
	}
	return fmt.Sprintf("MIG mode %d", int(m))
}

// TopologyLevel is nvmlGpuTopologyLevel_t: how far apart two GPUs are in the PCIe tree. A
// smaller value is a closer pair.
type TopologyLevel int

// Topology levels (values and meanings as in nvml.h's nvmlGpuTopologyLevel_t).
const (
	// TopologyInternal is two GPUs on one board (e.g. Tesla K80).
	TopologyInternal TopologyLevel = 0
	// TopologySingle is GPUs behind one PCIe switch.
	TopologySingle TopologyLevel = 10
	// TopologyMultiple is GPUs behind several PCIe switches, without crossing a host bridge.
	TopologyMultiple TopologyLevel = 20
	// TopologyHostBridge is GPUs on one host bridge.
	TopologyHostBridge TopologyLevel = 30
	// TopologyNode is GPUs on one NUMA node, possibly across host bridges.
	TopologyNode TopologyLevel = 40
	// TopologySystem is GPUs on different NUMA nodes.
	TopologySystem TopologyLevel = 50
)

var topologyNames = map[TopologyLevel]string{
	TopologyInternal: "internal", TopologySingle: "single PCIe switch", TopologyMultiple: "multiple PCIe switches",
	TopologyHostBridge: "host bridge", TopologyNode: "NUMA node", TopologySystem: "system",
}

// String names the level as nvml.h describes it.
func (l TopologyLevel) String() string {
	if n, ok := topologyNames[l]; ok {
		return n
	}
	return fmt.Sprintf("topology level %d", int(l))
}

// SameNUMANode reports whether two GPUs this far apart share a NUMA node (every level up
// to TopologyNode does).
func (l TopologyLevel) SameNUMANode() bool { return l <= TopologyNode }

// Placement is a GPU instance placement in memory slices (nvmlGpuInstancePlacement_t).
type Placement struct {
	Start int `json:"start"`
	Size  int `json:"size"`
}

// GPUInstanceProfileInfo is the part of nvmlGpuInstanceProfileInfo_t the agent uses.
type GPUInstanceProfileInfo struct {
	// Profile is the GPU_INSTANCE_PROFILE_* value asked for.
	Profile int `json:"profile"`
	// ID is NVML's profile id (what nvidia-smi prints).
	ID                  int    `json:"id"`
	SliceCount          int    `json:"sliceCount"`
	InstanceCount       int    `json:"instanceCount"`
	MemorySizeMB        uint64 `json:"memorySizeMB"`
	MultiprocessorCount int    `json:"multiprocessorCount"`
	// The engines an instance of the profile gets: what its media option (+me, +me.all, -me)
	// means on this GPU. Zero where a backend does not report them.
	CopyEngineCount int `json:"copyEngineCount"`
	DecoderCount    int `json:"decoderCount"`
	EncoderCount    int `json:"encoderCount"`
	JpegCount       int `json:"jpegCount"`
	OfaCount        int `json:"ofaCount"`
}

// ComputeInstanceProfileInfo is the part of nvmlComputeInstanceProfileInfo_t the agent uses.
type ComputeInstanceProfileInfo struct {
	// Profile is the COMPUTE_INSTANCE_PROFILE_* value asked for.
	Profile       int `json:"profile"`
	ID            int `json:"id"`
	SliceCount    int `json:"sliceCount"`
	InstanceCount int `json:"instanceCount"`
}

// GPUInstanceInfo describes an existing GPU instance.
type GPUInstanceInfo struct {
	ID int `json:"id"`
	// ProfileID is NVML's profile id of the instance (GpuInstanceProfileInfo.ID).
	ProfileID int       `json:"profileId"`
	Placement Placement `json:"placement"`
}

// ComputeInstanceInfo describes an existing compute instance.
type ComputeInstanceInfo struct {
	ID        int `json:"id"`
	ProfileID int `json:"profileId"`
}

// MIGDevice is a MIG device handle's identity: the (GPU instance, compute instance) it is.
type MIGDevice struct {
	UUID              string `json:"uuid"`
	GPUInstanceID     int    `json:"gpuInstanceId"`
	ComputeInstanceID int    `json:"computeInstanceId"`
}

// Library is an initialised NVML.
type Library interface {
	// Init loads and initialises NVML. It fails with ErrorLibraryNotFound or
	// ErrorDriverNotLoaded on a machine without a usable driver.
	Init() error
	Shutdown() error
	DriverVersion() (string, error)
	DeviceCount() (int, error)
	Device(index int) (Device, error)
	// EventSetCreate is nvmlEventSetCreate: an empty set that devices register events in.
	EventSetCreate() (EventSet, error)
}

// GPUResetter is a Library that can reset a GPU (what nvidia-smi --gpu-reset does): a pending
// MIG mode takes effect (on A100 and A30 only a reset makes it current), every MIG instance is
// gone. NVML's API has no such call; a backend that cannot reset does not implement it. It
// fails while a process or another client holds the GPU.
type GPUResetter interface {
	ResetGPU(index int) error
}

// Device is one physical GPU.
type Device interface {
	UUID() (string, error)
	Name() (string, error)
	MemoryMiB() (uint64, error)
	// PCIDeviceID is NVML's pciDeviceId (device << 16 | vendor).
	PCIDeviceID() (uint32, error)
	// MIGMode returns the current and pending MIG modes; ErrorNotSupported on
	// GPUs without MIG.
	MIGMode() (current, pending MIGMode, err error)
	// SetMIGMode is nvmlDeviceSetMigMode. err is the call's own return: ErrorNotSupported on
	// a GPU without MIG, ErrorNoPermission without root, ErrorInUse (docs/design/geometry.md,
	// "MIG mode") while the GPU has a GPU instance. activation is its activationStatus, set
	// when err is nil: Success when mode is now current, ErrorResetRequired when it is pending
	// until a GPU reset, ErrorInUse when it is pending because a client holds the GPU (idle
	// it and call again). Whatever it says, read MIGMode back.
	SetMIGMode(mode MIGMode) (activation Return, err error)
	// TopologyCommonAncestor is nvmlDeviceGetTopologyCommonAncestor: the nearest point of
	// the PCIe tree this GPU and other share; ErrorNotSupported where the OS cannot tell.
	TopologyCommonAncestor(other Device) (TopologyLevel, error)
	// NVLinkPeer is nvmlDeviceGetP2PStatus with NVML_P2P_CAPS_INDEX_NVLINK: whether this
	// GPU and other reach each other peer-to-peer over NVLink.
	NVLinkPeer(other Device) (bool, error)
	// GPUInstanceProfileInfo is nvmlDeviceGetGpuInstanceProfileInfo for a
	// GPU_INSTANCE_PROFILE_* value; ErrorNotSupported when the GPU lacks it.
	GPUInstanceProfileInfo(profile int) (GPUInstanceProfileInfo, error)
	// GPUInstancePossiblePlacements lists every placement of the profile on an
	// empty GPU, in NVML order.
	GPUInstancePossiblePlacements(info GPUInstanceProfileInfo) ([]Placement, error)
	// CreateGPUInstanceWithPlacement creates a GPU instance at exactly that
	// placement: ErrorInsufficientResources when it overlaps or the count limit
	// is reached, ErrorInvalidArgument for a placement the profile does not have.
	CreateGPUInstanceWithPlacement(info GPUInstanceProfileInfo, pl Placement) (GPUInstance, error)
	// GPUInstances lists the GPU instances of a profile.
	GPUInstances(info GPUInstanceProfileInfo) ([]GPUInstance, error)
	// MIGDevices lists the MIG devices (one per compute instance).
	MIGDevices() ([]MIGDevice, error)
	// SupportedEventTypes is nvmlDeviceGetSupportedEventTypes: a mask of Event* values.
	SupportedEventTypes() (uint64, error)
	// RegisterEvents is nvmlDeviceRegisterEvents: the device's events of the types in mask
	// are delivered to set (one EventSetCreate returned).
	RegisterEvents(mask uint64, set EventSet) error
	// RecoveryAction is the field NVML_FI_DEV_GET_GPU_RECOVERY_ACTION
	// (nvmlDeviceGetFieldValues): what the driver says the GPU needs to work again;
	// ErrorNotSupported on a driver without the field.
	RecoveryAction() (RecoveryAction, error)
}

// GPUInstance is one GPU instance.
type GPUInstance interface {
	Info() (GPUInstanceInfo, error)
	// ComputeInstanceProfileInfo is nvmlGpuInstanceGetComputeInstanceProfileInfo
	// (engine profile shared); ErrorNotSupported when the GPU instance cannot hold it.
	ComputeInstanceProfileInfo(profile int) (ComputeInstanceProfileInfo, error)
	CreateComputeInstance(info ComputeInstanceProfileInfo) (ComputeInstance, error)
	ComputeInstances(info ComputeInstanceProfileInfo) ([]ComputeInstance, error)
	// Destroy fails with ErrorInUse while a compute instance exists.
	Destroy() error
}

// ComputeInstance is one compute instance.
type ComputeInstance interface {
	Info() (ComputeInstanceInfo, error)
	// Destroy fails with ErrorInUse while a process uses the MIG device.
	Destroy() error
}

// Event types (nvmlEventType* values, nvml.h) the agent registers.
const (
	// EventXidCriticalError is an XID error; Event.Data is the XID.
	EventXidCriticalError uint64 = 0x8
	// EventGPUUnavailable is a GPU that became unavailable (e.g. fallen off the bus).
	EventGPUUnavailable uint64 = 0x4000
	// EventGPURecoveryAction is a change of the GPU's recovery action; Event.Data is the
	// new RecoveryAction.
	EventGPURecoveryAction uint64 = 0x8000
)

// NoInstance is the GPU and compute instance id of an event that names no MIG instance
// (0xFFFFFFFF in nvmlEventData_t).
const NoInstance uint32 = 0xFFFFFFFF

// Event is nvmlEventData_t.
type Event struct {
	// Device is the GPU the event is about (the physical GPU, also for a MIG instance's XID).
	Device Device
	// Type is one Event* value.
	Type uint64
	// Data is the XID of an XID event, the RecoveryAction of a recovery-action event.
	Data uint64
	// GPUInstanceID and ComputeInstanceID name the MIG instance an XID happened in
	// (NoInstance when it names none: the whole GPU).
	GPUInstanceID     uint32
	ComputeInstanceID uint32
}

// EventSet is an nvmlEventSet_t.
type EventSet interface {
	// Wait is nvmlEventSetWait_v2: the next event of a registered device, or ErrorTimeout
	// when none came within timeout.
	Wait(timeout time.Duration) (Event, error)
	// Free is nvmlEventSetFree.
	Free() error
}

// RecoveryAction is nvmlDeviceGpuRecoveryAction_t: what a GPU needs to work again.
type RecoveryAction int

// Recovery actions (values as in nvml.h).
const (
	RecoveryNone          RecoveryAction = 0
	RecoveryGPUReset      RecoveryAction = 1
	RecoveryNodeReboot    RecoveryAction = 2
	RecoveryDrainP2P      RecoveryAction = 3
	RecoveryDrainAndReset RecoveryAction = 4
)

var recoveryNames = map[RecoveryAction]string{
	RecoveryNone: "none", RecoveryGPUReset: "GPU reset", RecoveryNodeReboot: "node reboot",
	RecoveryDrainP2P: "drain peer-to-peer", RecoveryDrainAndReset: "drain and GPU reset",
}

// String names the action as an operator reads it ("GPU reset").
func (a RecoveryAction) String() string {
	if n, ok := recoveryNames[a]; ok {
		return n
	}
	return fmt.Sprintf("recovery action %d", int(a))
}
