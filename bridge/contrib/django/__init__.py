"""The bridge in a Django project: its schedules, runs, incidents and audit log in the
Django admin, every change made there going through :class:`bridge.Bridge`.

Add the app and, where the bridge's tables are not in Django's ``default`` database,
name the database that holds them::

    INSTALLED_APPS += ["bridge.contrib.django"]
    DATABASE_ROUTERS = ["bridge.contrib.django.router.BridgeRouter"]
    BRIDGE_DJANGO_DATABASE = "default"  # the alias whose database holds the bridge's tables

``celery -A PROJ bridge migrate`` creates the tables, as anywhere else; Django's own
``migrate`` leaves them alone. See docs/django.md.
"""
