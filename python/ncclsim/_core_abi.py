"""The fake CUDA core's C boundary as ncclsim's Python package calls it.

Generated from the Rust declaration (`fake_cuda_abi::core_api!`, `fake_cuda_abi::describe`)
by `UPDATE_GENERATED=1 cargo test -p ncclsim-cuda --test generated`; a test keeps it equal
to what the declaration gives. Do not edit.
"""

CORE_ABI_VERSION = 2
CORE_SYMBOL = "ncclsim_cuda_core_v1"
CORE_LIBRARY = "libncclsim_cuda.so"

# Byte offsets of the vtable's size (size_t), version (uint32) and last_error_message.
SIZE_OFFSET = 0
VERSION_OFFSET = 8
LAST_ERROR_MESSAGE_OFFSET = 16

# Byte offset of each entry's function pointer in the vtable.
ENTRY_OFFSET = {
    "device_count": 24,
    "device_info": 32,
    "get_device": 40,
    "set_device": 48,
    "malloc": 56,
    "free": 64,
    "mem_info": 72,
    "host_alloc": 80,
    "host_free": 88,
    "host_register": 96,
    "host_unregister": 104,
    "pointer_info": 112,
    "memcpy": 120,
    "memcpy_2d": 128,
    "memset": 136,
    "stream_create": 144,
    "stream_destroy": 152,
    "stream_info": 160,
    "stream_query": 168,
    "stream_synchronize": 176,
    "stream_wait_event": 184,
    "stream_clock": 192,
    "enqueue": 200,
    "device_synchronize": 208,
    "event_create": 216,
    "event_destroy": 224,
    "event_record": 232,
    "event_query": 240,
    "event_synchronize": 248,
    "event_elapsed_ms": 256,
    "ipc_get_mem_handle": 264,
    "ipc_open_mem_handle": 272,
    "ipc_close_mem_handle": 280,
    "ipc_get_event_handle": 288,
    "ipc_open_event_handle": 296,
    "register_function": 304,
    "launch_kernel": 312,
    "physical_device_count": 320,
    "physical_device_info": 328,
    "physical_device_topology": 336,
    "topology_common_ancestor": 344,
    "begin_capture": 352,
    "end_capture": 360,
    "capture_info": 368,
    "graph_create": 376,
    "graph_destroy": 384,
    "graph_node_count": 392,
    "graph_write_dot": 400,
    "graph_instantiate": 408,
    "graph_exec_destroy": 416,
    "graph_launch": 424,
    "device_reset": 432,
    "pointer_arena": 440,
    "enqueue_owned": 448,
    "trim_device": 456,
    "mem_create": 464,
    "mem_release": 472,
    "mem_address_reserve": 480,
    "mem_address_free": 488,
    "mem_map": 496,
    "mem_unmap": 504,
    "mem_set_access": 512,
    "mem_get_access": 520,
    "mem_export": 528,
    "mem_import": 536,
    "mem_retain": 544,
    "mem_handle_info": 552,
    "memset_pattern": 560,
    "host_stream": 568,
    "memory_stats": 576,
    "profiler": 584,
    "report_section": 592,
    "buffer_extent": 600,
    "physical_device_busy": 608,
    "host_wait": 616,
    "fd_offer": 624,
    "fd_withdraw": 632,
    "fd_fetch": 640,
    "commit_memory": 648,
    "mcast_create": 656,
    "mcast_add_device": 664,
    "mcast_bind_mem": 672,
    "mcast_bind_addr": 680,
    "mcast_unbind": 688,
    "enqueue_meeting": 696,
    "buffer_extent_commit": 704,
    "physical_device_fabric": 712,
    "physical_device_board": 720,
    "launch_compute": 728,
    "user_object_create": 736,
    "user_object_retain": 744,
    "user_object_release": 752,
    "graph_retain_user_object": 760,
    "graph_release_user_object": 768,
    "job_group_add": 776,
    "job_group_get": 784,
    "run_settings": 792,
    "run_environment": 800,
    "step_mark": 808,
    "graph_exec_update": 816,
}

UNIT_VECTOR = 0
UNIT_TENSOR = 1
PRECISION_F64 = 0
PRECISION_F32 = 1
PRECISION_TF32 = 2
PRECISION_F16 = 3
PRECISION_BF16 = 4
PRECISION_F8 = 5
RUN_COMPUTE_UNSET = 0
RUN_COMPUTE_RUN = 1
RUN_COMPUTE_TIME = 2
RUN_COMPUTE_OFF = 3
ATTENTION_NONE = 0
ATTENTION_FLASH = 1
ATTENTION_MEM_EFFICIENT = 2
ATTENTION_CUDNN = 3
COST_BACKWARD = 1
COST_CAUSAL = 2
COST_HOST_OP = 4
STEP_QUERY = -1
STEP_BY_OPTIMIZER = 1
STEP_BY_PROFILER = 2

STATUS_SUCCESS = 0
STATUS_INVALID_DEVICE = 1
STATUS_NO_DEVICE = 2
STATUS_OUT_OF_MEMORY = 3
STATUS_INVALID_VALUE = 4
STATUS_INVALID_POINTER = 5
STATUS_INVALID_HANDLE = 6
STATUS_NOT_READY = 7
STATUS_INVALID_IPC_HANDLE = 8
STATUS_IPC_MAP_FAILED = 9
STATUS_OS = 10
STATUS_KERNEL_REFUSED = 11
STATUS_NOT_SUPPORTED = 12
STATUS_INTERNAL = 13
STATUS_CAPTURE_VIOLATION = 14

# (field, ctypes type, byte offset) of CKernelCost, 64 bytes.
KERNEL_COST_FIELDS = [
    ("flops", "c_double", 0),
    ("bytes", "c_double", 8),
    ("unit", "c_int32", 16),
    ("precision", "c_int32", 20),
    ("batch", "c_uint64", 24),
    ("m", "c_uint64", 32),
    ("n", "c_uint64", 40),
    ("k", "c_uint64", 48),
    ("attention", "c_uint32", 56),
    ("flags", "c_uint32", 60),
]
KERNEL_COST_SIZE = 64

# (field, ctypes type, byte offset) of CMaybeTime, 16 bytes.
MAYBE_TIME_FIELDS = [
    ("present", "c_uint32", 0),
    ("reserved", "c_uint32", 4),
    ("ns", "c_uint64", 8),
]
MAYBE_TIME_SIZE = 16

# (field, ctypes type, byte offset) of CLaunchTimes, 32 bytes.
LAUNCH_TIMES_FIELDS = [
    ("placed", "c_uint32", 0),
    ("in_range", "c_uint32", 4),
    ("range", "c_uint64", 8),
    ("start_ns", "c_uint64", 16),
    ("duration_ns", "c_uint64", 24),
]
LAUNCH_TIMES_SIZE = 32
