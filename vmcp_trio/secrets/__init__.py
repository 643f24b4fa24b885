"""The secrets manager: named secrets for ``vmcp proxy --remote-forward-headers-secret
Name=<secret_name>`` and the ``vmcp secret set|get|list|delete NAME`` command.

Lookup order, for ``vmcp secret get`` and for :meth:`SecretsManager.get` alike:

1. the environment provider: the variable ``VMCP_SECRET_<NAME>``, or
   ``VMCP_SECRET_<SECRET>__<KEY>`` for a name ``SECRET/KEY`` (upper-cased, every character
   other than a letter or digit as ``_``; an empty variable counts as unset). It is a
   deployment's override and wins over the file;
2. the encrypted file provider: ``VMCP_SECRETS_FILE``, else
   ``$XDG_CONFIG_HOME/vmcp/secrets.json.enc``, else ``~/.config/vmcp/secrets.json.enc``; one
   AES-256-GCM blob holding the JSON map of names to values. Its key is ``VMCP_SECRETS_KEY_FILE``
   (32 bytes, raw or hex), else derived by scrypt from ``VMCP_SECRETS_PASSWORD``, else the one
   the first ``set`` made: in the OS keyring, or in the key file
   ``$XDG_CONFIG_HOME/vmcp/secrets.key``. It is opened only when the environment does not
   answer.

``vmcp serve`` and ``vmcp validate`` look a Secret reference ``{name, key}`` up as
``NAME/KEY`` here, after the configuration's own Secret documents and ``VMCP_SECRETS_DIR``.
``set`` and ``delete`` change the file only. A name is 1-128 characters of ``[A-Za-z0-9_.-]``,
or ``SECRET/KEY``. No message, log line or error ever carries a value; only ``vmcp secret get``
prints one.

Modules: ``names`` (the name rule and its variable), ``errors``, ``file_format`` (the file
format, no I/O), ``keys`` (which key, and a new one), ``os_keyring`` (the OS keyring),
``private_files`` (vmcp's configuration folder, files only their owner reads), ``environment``
and ``encrypted_file`` (the two providers), ``manager`` (the lookup order), ``command`` (the
command line). The package
itself imports nothing: ``vmcp`` builds its parser with ``command`` on every start, and the
providers' imports (``tempfile``, ``cryptography``) would cost that start ~15 ms. Import from the
modules.

    >>> from vmcp_trio.secrets.manager import SecretsManager   # doctest: +SKIP
    >>> secrets = SecretsManager.from_environment()      # doctest: +SKIP
    >>> secrets.get("github-token")                      # doctest: +SKIP
"""
