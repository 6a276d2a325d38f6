"""Registry credentials for image pulls, as the kubelet finds them: the pod's imagePullSecrets
(docker_config.py), matched to the image by a keyring (keyring.py), then the credential provider
plugins (plugins.py); pull_credentials.py puts them together for one pull."""
