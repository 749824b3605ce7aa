"""NATS identities: the hub's, each deployment's and each producer's nkey
user, their permissions, and the server configuration that admits them."""

from .config import DeploymentUser as DeploymentUser
from .config import ProducerUser as ProducerUser
from .config import deployment_permissions as deployment_permissions
from .config import is_public_user as is_public_user
from .config import producer_permissions as producer_permissions
from .config import producer_users_of as producer_users_of
from .config import render_authorization as render_authorization
from .config import users_of as users_of
from .keys import HUB_SEED_FILE as HUB_SEED_FILE
from .keys import UserKey as UserKey
from .keys import hub_seed as hub_seed
from .keys import new_user_key as new_user_key
from .keys import public_key as public_key

__all__ = [
    "HUB_SEED_FILE",
    "DeploymentUser",
    "ProducerUser",
    "UserKey",
    "deployment_permissions",
    "hub_seed",
    "is_public_user",
    "new_user_key",
    "producer_permissions",
    "producer_users_of",
    "public_key",
    "render_authorization",
    "users_of",
]
