"""The secrets manager: named secrets for ``vmcp proxy --remote-forward-headers-secret
Name=<secret_name>`` and the ``vmcp secret set|get|list|delete NAME`` command.

Lookup order, for ``vmcp secret get`` and for :meth:`SecretsManager.get` alike:

1. the environment provider: the variable ``VMCP_SECRET_<NAME>`` (NAME upper-cased, every
   character other than a letter or digit as ``_``; an empty variable counts as unset). It is
   a deployment's override and wins over the file;
2. the encrypted file provider: ``VMCP_SECRETS_FILE``, else
   ``$XDG_CONFIG_HOME/vmcp/secrets.json.enc``, else ``~/.config/vmcp/secrets.json.enc``; one
   AES-256-GCM blob holding the JSON map of names to values, its key derived by scrypt from
   ``VMCP_SECRETS_PASSWORD`` or read from ``VMCP_SECRETS_KEY_FILE`` (32 bytes, raw or hex). It
   is opened only when the environment does not answer.

``set`` and ``delete`` change the file only. A name is 1-128 characters of ``[A-Za-z0-9_.-]``.
No message, log line or error ever carries a value; only ``vmcp secret get`` prints one.

Modules: ``names`` (the name rule and its variable), ``errors``, ``sealing`` (the file format,
no I/O), ``keys`` (password or key file), ``environment`` and ``encrypted_file`` (the two
providers), ``manager`` (the lookup order), ``command`` (the command line). The package
itself imports nothing: ``vmcp`` builds its parser with ``command`` on every start, and the
providers' imports (``tempfile``, ``cryptography``) would cost that start ~15 ms. Import from the
modules.

    >>> from vmcp_trio.secrets.manager import SecretsManager   # doctest: +SKIP
    >>> secrets = SecretsManager.from_environment()      # doctest: +SKIP
    >>> secrets.get("github-token")                      # doctest: +SKIP
"""
