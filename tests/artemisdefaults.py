"""The ``<security-setting match="#">`` that ``artemis create`` puts in a new broker.xml (every one of
Artemis' ten permission types granted to role ``amq``), for the tests that check tdbroker takes such a file
unchanged (unit and system)."""

ARTEMIS_CREATE_SECURITY_SETTING = """<security-setting match="#">
    <permission type="createNonDurableQueue" roles="amq"/>
    <permission type="deleteNonDurableQueue" roles="amq"/>
    <permission type="createDurableQueue" roles="amq"/>
    <permission type="deleteDurableQueue" roles="amq"/>
    <permission type="createAddress" roles="amq"/>
    <permission type="deleteAddress" roles="amq"/>
    <permission type="consume" roles="amq"/>
    <permission type="browse" roles="amq"/>
    <permission type="send" roles="amq"/>
    <permission type="manage" roles="amq"/>
  </security-setting>"""
