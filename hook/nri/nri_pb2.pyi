from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Event(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    UNKNOWN: _ClassVar[Event]
    RUN_POD_SANDBOX: _ClassVar[Event]
    STOP_POD_SANDBOX: _ClassVar[Event]
    REMOVE_POD_SANDBOX: _ClassVar[Event]
    CREATE_CONTAINER: _ClassVar[Event]
    POST_CREATE_CONTAINER: _ClassVar[Event]
    START_CONTAINER: _ClassVar[Event]
    POST_START_CONTAINER: _ClassVar[Event]
    UPDATE_CONTAINER: _ClassVar[Event]
    POST_UPDATE_CONTAINER: _ClassVar[Event]
    STOP_CONTAINER: _ClassVar[Event]
    REMOVE_CONTAINER: _ClassVar[Event]
UNKNOWN: Event
RUN_POD_SANDBOX: Event
STOP_POD_SANDBOX: Event
REMOVE_POD_SANDBOX: Event
CREATE_CONTAINER: Event
POST_CREATE_CONTAINER: Event
START_CONTAINER: Event
POST_START_CONTAINER: Event
UPDATE_CONTAINER: Event
POST_UPDATE_CONTAINER: Event
STOP_CONTAINER: Event
REMOVE_CONTAINER: Event

class Empty(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RegisterPluginRequest(_message.Message):
    __slots__ = ("plugin_name", "plugin_idx", "NRI_version")
    PLUGIN_NAME_FIELD_NUMBER: _ClassVar[int]
    PLUGIN_IDX_FIELD_NUMBER: _ClassVar[int]
    NRI_VERSION_FIELD_NUMBER: _ClassVar[int]
    plugin_name: str
    plugin_idx: str
    NRI_version: str
    def __init__(self, plugin_name: _Optional[str] = ..., plugin_idx: _Optional[str] = ..., NRI_version: _Optional[str] = ...) -> None: ...

class ConfigureRequest(_message.Message):
    __slots__ = ("config", "runtime_name", "runtime_version", "registration_timeout", "request_timeout", "NRI_version")
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_NAME_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_VERSION_FIELD_NUMBER: _ClassVar[int]
    REGISTRATION_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    REQUEST_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    NRI_VERSION_FIELD_NUMBER: _ClassVar[int]
    config: str
    runtime_name: str
    runtime_version: str
    registration_timeout: int
    request_timeout: int
    NRI_version: str
    def __init__(self, config: _Optional[str] = ..., runtime_name: _Optional[str] = ..., runtime_version: _Optional[str] = ..., registration_timeout: _Optional[int] = ..., request_timeout: _Optional[int] = ..., NRI_version: _Optional[str] = ...) -> None: ...

class ConfigureResponse(_message.Message):
    __slots__ = ("events",)
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    events: int
    def __init__(self, events: _Optional[int] = ...) -> None: ...

class SynchronizeRequest(_message.Message):
    __slots__ = ("pods", "containers", "more")
    PODS_FIELD_NUMBER: _ClassVar[int]
    CONTAINERS_FIELD_NUMBER: _ClassVar[int]
    MORE_FIELD_NUMBER: _ClassVar[int]
    pods: _containers.RepeatedCompositeFieldContainer[PodSandbox]
    containers: _containers.RepeatedCompositeFieldContainer[Container]
    more: bool
    def __init__(self, pods: _Optional[_Iterable[_Union[PodSandbox, _Mapping]]] = ..., containers: _Optional[_Iterable[_Union[Container, _Mapping]]] = ..., more: _Optional[bool] = ...) -> None: ...

class SynchronizeResponse(_message.Message):
    __slots__ = ("more",)
    MORE_FIELD_NUMBER: _ClassVar[int]
    more: bool
    def __init__(self, more: _Optional[bool] = ...) -> None: ...

class CreateContainerRequest(_message.Message):
    __slots__ = ("pod", "container")
    POD_FIELD_NUMBER: _ClassVar[int]
    CONTAINER_FIELD_NUMBER: _ClassVar[int]
    pod: PodSandbox
    container: Container
    def __init__(self, pod: _Optional[_Union[PodSandbox, _Mapping]] = ..., container: _Optional[_Union[Container, _Mapping]] = ...) -> None: ...

class CreateContainerResponse(_message.Message):
    __slots__ = ("adjust",)
    ADJUST_FIELD_NUMBER: _ClassVar[int]
    adjust: ContainerAdjustment
    def __init__(self, adjust: _Optional[_Union[ContainerAdjustment, _Mapping]] = ...) -> None: ...

class RemoveContainerRequest(_message.Message):
    __slots__ = ("pod", "container")
    POD_FIELD_NUMBER: _ClassVar[int]
    CONTAINER_FIELD_NUMBER: _ClassVar[int]
    pod: PodSandbox
    container: Container
    def __init__(self, pod: _Optional[_Union[PodSandbox, _Mapping]] = ..., container: _Optional[_Union[Container, _Mapping]] = ...) -> None: ...

class RemoveContainerResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PodSandbox(_message.Message):
    __slots__ = ("id", "name", "uid", "namespace", "runtime_handler")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    UID_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_HANDLER_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    uid: str
    namespace: str
    runtime_handler: str
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., uid: _Optional[str] = ..., namespace: _Optional[str] = ..., runtime_handler: _Optional[str] = ...) -> None: ...

class Container(_message.Message):
    __slots__ = ("id", "pod_sandbox_id", "name", "args", "env", "mounts", "hooks", "CDI_devices")
    ID_FIELD_NUMBER: _ClassVar[int]
    POD_SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGS_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    MOUNTS_FIELD_NUMBER: _ClassVar[int]
    HOOKS_FIELD_NUMBER: _ClassVar[int]
    CDI_DEVICES_FIELD_NUMBER: _ClassVar[int]
    id: str
    pod_sandbox_id: str
    name: str
    args: _containers.RepeatedScalarFieldContainer[str]
    env: _containers.RepeatedScalarFieldContainer[str]
    mounts: _containers.RepeatedCompositeFieldContainer[Mount]
    hooks: Hooks
    CDI_devices: _containers.RepeatedCompositeFieldContainer[CDIDevice]
    def __init__(self, id: _Optional[str] = ..., pod_sandbox_id: _Optional[str] = ..., name: _Optional[str] = ..., args: _Optional[_Iterable[str]] = ..., env: _Optional[_Iterable[str]] = ..., mounts: _Optional[_Iterable[_Union[Mount, _Mapping]]] = ..., hooks: _Optional[_Union[Hooks, _Mapping]] = ..., CDI_devices: _Optional[_Iterable[_Union[CDIDevice, _Mapping]]] = ...) -> None: ...

class Mount(_message.Message):
    __slots__ = ("destination", "type", "source", "options")
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    destination: str
    type: str
    source: str
    options: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, destination: _Optional[str] = ..., type: _Optional[str] = ..., source: _Optional[str] = ..., options: _Optional[_Iterable[str]] = ...) -> None: ...

class Hooks(_message.Message):
    __slots__ = ("prestart", "create_runtime", "create_container", "start_container", "poststart", "poststop")
    PRESTART_FIELD_NUMBER: _ClassVar[int]
    CREATE_RUNTIME_FIELD_NUMBER: _ClassVar[int]
    CREATE_CONTAINER_FIELD_NUMBER: _ClassVar[int]
    START_CONTAINER_FIELD_NUMBER: _ClassVar[int]
    POSTSTART_FIELD_NUMBER: _ClassVar[int]
    POSTSTOP_FIELD_NUMBER: _ClassVar[int]
    prestart: _containers.RepeatedCompositeFieldContainer[Hook]
    create_runtime: _containers.RepeatedCompositeFieldContainer[Hook]
    create_container: _containers.RepeatedCompositeFieldContainer[Hook]
    start_container: _containers.RepeatedCompositeFieldContainer[Hook]
    poststart: _containers.RepeatedCompositeFieldContainer[Hook]
    poststop: _containers.RepeatedCompositeFieldContainer[Hook]
    def __init__(self, prestart: _Optional[_Iterable[_Union[Hook, _Mapping]]] = ..., create_runtime: _Optional[_Iterable[_Union[Hook, _Mapping]]] = ..., create_container: _Optional[_Iterable[_Union[Hook, _Mapping]]] = ..., start_container: _Optional[_Iterable[_Union[Hook, _Mapping]]] = ..., poststart: _Optional[_Iterable[_Union[Hook, _Mapping]]] = ..., poststop: _Optional[_Iterable[_Union[Hook, _Mapping]]] = ...) -> None: ...

class Hook(_message.Message):
    __slots__ = ("path", "args", "env", "timeout")
    PATH_FIELD_NUMBER: _ClassVar[int]
    ARGS_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    path: str
    args: _containers.RepeatedScalarFieldContainer[str]
    env: _containers.RepeatedScalarFieldContainer[str]
    timeout: OptionalInt
    def __init__(self, path: _Optional[str] = ..., args: _Optional[_Iterable[str]] = ..., env: _Optional[_Iterable[str]] = ..., timeout: _Optional[_Union[OptionalInt, _Mapping]] = ...) -> None: ...

class OptionalInt(_message.Message):
    __slots__ = ("value",)
    VALUE_FIELD_NUMBER: _ClassVar[int]
    value: int
    def __init__(self, value: _Optional[int] = ...) -> None: ...

class OptionalUInt32(_message.Message):
    __slots__ = ("value",)
    VALUE_FIELD_NUMBER: _ClassVar[int]
    value: int
    def __init__(self, value: _Optional[int] = ...) -> None: ...

class OptionalFileMode(_message.Message):
    __slots__ = ("value",)
    VALUE_FIELD_NUMBER: _ClassVar[int]
    value: int
    def __init__(self, value: _Optional[int] = ...) -> None: ...

class LinuxDevice(_message.Message):
    __slots__ = ("path", "type", "major", "minor", "file_mode", "uid", "gid")
    PATH_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    MAJOR_FIELD_NUMBER: _ClassVar[int]
    MINOR_FIELD_NUMBER: _ClassVar[int]
    FILE_MODE_FIELD_NUMBER: _ClassVar[int]
    UID_FIELD_NUMBER: _ClassVar[int]
    GID_FIELD_NUMBER: _ClassVar[int]
    path: str
    type: str
    major: int
    minor: int
    file_mode: OptionalFileMode
    uid: OptionalUInt32
    gid: OptionalUInt32
    def __init__(self, path: _Optional[str] = ..., type: _Optional[str] = ..., major: _Optional[int] = ..., minor: _Optional[int] = ..., file_mode: _Optional[_Union[OptionalFileMode, _Mapping]] = ..., uid: _Optional[_Union[OptionalUInt32, _Mapping]] = ..., gid: _Optional[_Union[OptionalUInt32, _Mapping]] = ...) -> None: ...

class CDIDevice(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class KeyValue(_message.Message):
    __slots__ = ("key", "value")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    key: str
    value: str
    def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...

class LinuxContainerAdjustment(_message.Message):
    __slots__ = ("devices",)
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    devices: _containers.RepeatedCompositeFieldContainer[LinuxDevice]
    def __init__(self, devices: _Optional[_Iterable[_Union[LinuxDevice, _Mapping]]] = ...) -> None: ...

class ContainerAdjustment(_message.Message):
    __slots__ = ("mounts", "env", "hooks", "linux", "CDI_devices")
    MOUNTS_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    HOOKS_FIELD_NUMBER: _ClassVar[int]
    LINUX_FIELD_NUMBER: _ClassVar[int]
    CDI_DEVICES_FIELD_NUMBER: _ClassVar[int]
    mounts: _containers.RepeatedCompositeFieldContainer[Mount]
    env: _containers.RepeatedCompositeFieldContainer[KeyValue]
    hooks: Hooks
    linux: LinuxContainerAdjustment
    CDI_devices: _containers.RepeatedCompositeFieldContainer[CDIDevice]
    def __init__(self, mounts: _Optional[_Iterable[_Union[Mount, _Mapping]]] = ..., env: _Optional[_Iterable[_Union[KeyValue, _Mapping]]] = ..., hooks: _Optional[_Union[Hooks, _Mapping]] = ..., linux: _Optional[_Union[LinuxContainerAdjustment, _Mapping]] = ..., CDI_devices: _Optional[_Iterable[_Union[CDIDevice, _Mapping]]] = ...) -> None: ...
